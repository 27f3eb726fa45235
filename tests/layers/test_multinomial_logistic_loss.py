"""MultinomialLogisticLoss: loss and gradient against numpy, the 1e-20 clamp, agreement with
Softmax + MultinomialLogisticLoss = SoftmaxWithLoss, gradient checks and errors; on both
engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import set_up
from tests.numerics import close_to

LOSS = 'name: "loss" type: "MultinomialLogisticLoss"'


def reference(p, labels):
    """(loss, dp) for loss weight 1."""
    p = p.astype(np.float32).astype(np.float64).reshape(p.shape[0], -1)
    num = p.shape[0]
    items = np.arange(num)
    picked = np.maximum(p[items, labels.astype(int).ravel()], 1e-20)
    grad = np.zeros_like(p)
    grad[items, labels.astype(int).ravel()] = -1 / picked / num
    return -np.log(picked).sum() / num, grad


CASES = [((4, 5), (4,)), ((3, 2, 2, 2), (3, 1, 1, 1)), ((2, 6), (2, 1))]


def case(shapes, seed):
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.2, 1.0, shapes[0])
    p /= p.reshape(p.shape[0], -1).sum(1).reshape((-1,) + (1,) * (p.ndim - 1))
    dim = int(np.prod(shapes[0][1:]))
    return p, rng.integers(0, dim, shapes[1]).astype(float)


@pytest.mark.parametrize("shapes", CASES)
@pytest.mark.parametrize("top_diff", [1.0, 1.5])
def test_forward_backward(engine, shapes, top_diff):
    p, labels = case(shapes, 0)
    layer, bottom, top = set_up(LOSS, [p, labels])
    loss = layer.forward(bottom, top)
    # GPU: written on the device (then read back by forward's weighted loss: SYNCED)
    assert_tops_on_device(layer, top)
    top[0].diff[...] = top_diff  # the loss weight backward scales by
    layer.backward(top, [True, False], bottom)
    expected_loss, expected_grad = reference(p, labels)
    assert top[0].shape == ()
    np.testing.assert_allclose(top[0].cpu_data, expected_loss, rtol=1e-6)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-6)
    close_to(bottom[0].cpu_diff.reshape(expected_grad.shape), top_diff * expected_grad, rtol=1e-6)


def test_zero_probability_is_clamped(engine):
    layer, bottom, top = set_up(LOSS, [np.array([[0.0, 1.0], [0.5, 0.5]]), np.array([0.0, 1.0])])
    layer.forward(bottom, top)
    expected = (-np.log(np.float32(1e-20)) - np.log(0.5)) / 2
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-6)
    layer.backward(top, [True, False], bottom)
    np.testing.assert_allclose(bottom[0].diff, [[-0.5 / np.float32(1e-20), 0], [0, -1]],
                               rtol=1e-6)


def test_softmax_then_this_equals_softmax_with_loss():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 4))
    labels = rng.integers(0, 4, 5).astype(float)
    e = np.exp(x - x.max(1, keepdims=True))
    layer, bottom, top = set_up(LOSS, [e / e.sum(1, keepdims=True), labels])
    softmax, s_bottom, s_top = set_up('name: "s" type: "SoftmaxWithLoss"', [x, labels])
    np.testing.assert_allclose(layer.forward(bottom, top), softmax.forward(s_bottom, s_top),
                               rtol=1e-5)


@pytest.mark.parametrize("engine, shapes, seed", engine_cases(
    [(shapes, 2) for shapes in CASES], [(((3, 2, 2), (3,)), 4)], unpack=True),
    indirect=["engine"])
def test_gradient(engine, shapes, seed):
    p, labels = case(shapes, seed)
    layer, bottom, top = set_up(LOSS + " loss_weight: 2", [p, labels])
    check_gradient(layer, bottom, top, check_bottom=[0], stepsize=1e-3)


def test_cannot_backpropagate_to_labels(engine):
    layer, bottom, top = set_up(LOSS, [np.ones((2, 3)) / 3, np.zeros(2)])
    layer.forward(bottom, top)
    with pytest.raises(CaffeError, match='"loss".*cannot backpropagate to label inputs'):
        layer.backward(top, [True, True], bottom)
    assert not layer.allow_force_backward(1)


@pytest.mark.parametrize("label", [3.0, -1.0])
def test_label_out_of_range(label, engine):
    layer, bottom, top = set_up(LOSS, [np.ones((2, 3)) / 3, np.array([0.0, label])])
    with pytest.raises(CaffeError, match=f'"loss".*label value {int(label)} is out of range'):
        layer.forward(bottom, top)


@pytest.mark.parametrize("shapes, message", [
    (((2, 3), (2, 2)), "one label per item"),
    (((2, 3), (2, 1, 1, 1, 1)), "one label per item"),
    (((2, 3), (3,)), "first dimension"),
])
def test_shape_errors(shapes, message):
    with pytest.raises(CaffeError, match=f'"loss".*{message}'):
        set_up(LOSS, [np.ones(shapes[0]), np.zeros(shapes[1])])
