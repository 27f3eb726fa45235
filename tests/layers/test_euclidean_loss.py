"""EuclideanLoss: loss and backward (either bottom, or both) against numpy, gradients to both
bottoms, loss weight, errors; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import set_up
from tests.numerics import close_to


def euclidean(extra=""):
    return f'name: "loss" type: "EuclideanLoss" {extra}'


SHAPES = [((4, 3), (4, 3)), ((2, 3, 4, 5), (2, 60)), ((5,), (5,))]


def pair(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=shapes[0]), rng.normal(size=shapes[1])]


@pytest.mark.parametrize("shapes", SHAPES)
def test_forward(shapes, engine):
    a, b = pair(shapes)
    layer, bottom, top = set_up(euclidean(), [a, b])
    loss = layer.forward(bottom, top)
    d = a.astype(np.float32).astype(np.float64).ravel() - b.astype(np.float32).ravel()
    expected = (d @ d) / a.shape[0] / 2
    assert top[0].shape == ()
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-5)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


@pytest.mark.parametrize("engine, shapes, extra, seed", engine_cases(
    [(shapes, "", 1) for shapes in SHAPES], [(((3, 2, 2), (3, 4)), "loss_weight: 2", 4)],
    unpack=True), indirect=["engine"])
def test_gradient_both_bottoms(engine, shapes, extra, seed):
    layer, bottom, top = set_up(euclidean(extra), pair(shapes, seed))
    check_gradient(layer, bottom, top)


def test_loss_weight_scales_gradient_and_loss(engine):
    a, b = pair(((3, 2), (3, 2)), 2)
    layer, bottom, top = set_up(euclidean("loss_weight: 3"), [a, b])
    loss = layer.forward(bottom, top)
    np.testing.assert_allclose(loss, 3 * top[0].data, rtol=1e-6)
    layer.backward(top, [True, True], bottom)
    d = a.astype(np.float32) - b.astype(np.float32)
    close_to(bottom[0].diff, 3 * d / 3, rtol=1e-6)
    close_to(bottom[1].diff, -3 * d / 3, rtol=1e-6)


# Layer.forward reads a weighted loss top back to the host (head SYNCED); loss_weight 0 keeps
# the head AT_GPU, and the top's diff is then set by hand.
@pytest.mark.parametrize("engine, shapes", engine_cases(SHAPES, SHAPES), indirect=["engine"])
@pytest.mark.parametrize("down", [[True, True], [False, True]])
def test_backward_against_numpy(engine, shapes, down):
    a, b = pair(shapes, 3)
    layer, bottom, top = set_up(euclidean("loss_weight: 0"), [a, b])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    d = a.astype(np.float32).reshape(b.shape) - b.astype(np.float32)
    # the CPU adds d^2 in float32 (sdot), the GPU in float64
    np.testing.assert_allclose(top[0].cpu_data, (d.astype(np.float64).ravel() ** 2).sum()
                               / a.shape[0] / 2, rtol=1e-5)
    top[0].diff[...] = np.float32(0.7)
    for blob in bottom:
        blob.diff[...] = 9
    layer.backward(top, down, bottom)
    for blob, sign, propagated in zip(bottom, (1, -1), down):
        want = sign * np.float32(0.7) * d.reshape(blob.shape) / a.shape[0] if propagated else 9
        close_to(blob.cpu_diff, want, rtol=1e-6)


def test_allows_force_backward_to_both():
    layer, _, _ = set_up(euclidean(), pair(((2, 2), (2, 2))))
    assert layer.allow_force_backward(0) and layer.allow_force_backward(1)


@pytest.mark.parametrize("shapes, message", [
    (((4, 3), (4, 4)), "same dimension"),
    (((4, 3), (2, 6)), "first dimension"),
])
def test_shape_errors(shapes, message):
    with pytest.raises(CaffeError, match=f'"loss".*{message}'):
        set_up(euclidean(), pair(shapes))


def test_needs_two_bottoms():
    with pytest.raises(CaffeError, match='"loss".*exactly 2 bottom'):
        set_up(euclidean(), [np.ones((2, 2))])
