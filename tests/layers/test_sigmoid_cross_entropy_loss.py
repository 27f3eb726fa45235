"""SigmoidCrossEntropyLoss: loss and gradient against numpy for every normalization (default
BATCH_SIZE, legacy flag), ignore_label, soft targets, extreme scores, gradients and errors; on
both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import set_up


def sigmoid_loss(loss_param="", extra=""):
    return f'name: "loss" type: "SigmoidCrossEntropyLoss" loss_param {{ {loss_param} }} {extra}'


def reference(x, t, ignore, mode):
    """(loss, dx) for loss weight 1, from -t log(s) - (1 - t) log(1 - s)."""
    x = x.astype(np.float32).astype(np.float64)
    t = t.astype(np.float32).astype(np.float64)
    valid = np.ones(x.shape, bool) if ignore is None else np.trunc(t) != ignore
    log_s = -np.logaddexp(0, -x)
    log_1s = -np.logaddexp(0, x)
    total = -(t * log_s + (1 - t) * log_1s)[valid].sum()
    norm = max(1.0, {"FULL": x.size, "VALID": valid.sum(), "BATCH_SIZE": x.shape[0],
                     "NONE": 1}[mode])
    grad = np.where(valid, 1 / (1 + np.exp(-x)) - t, 0) / norm
    return total / norm, grad


def data(shape, seed, ignore=None, hard=False):
    rng = np.random.default_rng(seed)
    x = rng.normal(scale=3, size=shape)
    t = rng.integers(0, 2, shape).astype(float) if hard else rng.random(shape)
    if ignore is not None:
        t[rng.random(shape) < 0.3] = ignore
    return x, t


SHAPES = [(4, 3), (2, 3, 4, 5), (5,)]


def run(shape, loss_param, ignore, mode, seed=0, hard=False, top_diff=1.0):
    x, t = data(shape, seed, ignore, hard)
    layer, bottom, top = set_up(sigmoid_loss(loss_param), [x, t])
    loss = layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    top[0].diff[...] = top_diff
    layer.backward(top, [True, False], bottom)
    expected_loss, expected_grad = reference(x, t, ignore, mode)
    assert top[0].shape == ()
    np.testing.assert_allclose(top[0].cpu_data, expected_loss, rtol=1e-5)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-5)
    np.testing.assert_allclose(bottom[0].cpu_diff, top_diff * expected_grad, rtol=1e-4,
                               atol=1e-7)


MODES = ["FULL", "VALID", "BATCH_SIZE", "NONE"]
IGNORES = [None, -1, 1, 0]
# The GPU cases: one normalization with each kind of ignore_label (hard targets for the
# labels a target can truncate to), on every shape.
GPU_MODES = [("VALID", 1), ("VALID", None), ("FULL", 0), ("NONE", None)]


@pytest.mark.parametrize("engine, shape, mode, ignore", engine_cases(
    [(shape, mode, ignore) for ignore in IGNORES for mode in MODES for shape in SHAPES],
    [(shape, mode, ignore) for mode, ignore in GPU_MODES for shape in SHAPES], unpack=True),
    indirect=["engine"])
def test_normalization_modes(engine, shape, mode, ignore):
    ignore_param = f"ignore_label: {ignore}" if ignore is not None else ""
    run(shape, f"normalization: {mode} {ignore_param}", ignore, mode,
        hard=ignore is not None and ignore >= 0, top_diff=1.3)


@pytest.mark.parametrize("shape", SHAPES)
def test_default_is_batch_size(shape, engine):
    run(shape, "", None, "BATCH_SIZE")
    run(shape, "ignore_label: -1", -1, "BATCH_SIZE")


@pytest.mark.parametrize("normalize, mode", [("true", "VALID"), ("false", "BATCH_SIZE")])
def test_legacy_normalize(normalize, mode, engine):
    run((3, 4), f"normalize: {normalize} ignore_label: -1", -1, mode)


def test_explicit_normalization_beats_legacy_flag():
    run((3, 4), "normalize: true normalization: FULL ignore_label: -1", -1, "FULL")


def test_extreme_scores_stay_finite(engine):
    x = np.array([[100.0, -100.0, 100.0, -100.0]])
    t = np.array([[0.0, 1.0, 1.0, 0.0]])
    layer, bottom, top = set_up(sigmoid_loss(), [x, t])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, 200.0, rtol=1e-6)
    layer.backward(top, [True, False], bottom)
    np.testing.assert_allclose(bottom[0].diff, [[1, -1, 0, 0]], atol=1e-6)


def test_all_ignored_gives_zero_loss_and_gradient(engine):
    x, _ = data((3, 2), 1)
    layer, bottom, top = set_up(sigmoid_loss("ignore_label: 5 normalization: VALID"),
                                [x, np.full((3, 2), 5.0)])
    layer.forward(bottom, top)
    layer.backward(top, [True, False], bottom)
    assert top[0].data == 0
    np.testing.assert_array_equal(bottom[0].diff, 0)


@pytest.mark.parametrize("engine, shape, loss_param, seed", engine_cases(
    [(shape, loss_param, 2) for loss_param in ("", "ignore_label: -1 normalization: VALID")
     for shape in SHAPES],
    [((3, 4), loss_param, 5) for loss_param in ("", "ignore_label: -1 normalization: VALID")],
    unpack=True), indirect=["engine"])
def test_gradient(engine, shape, loss_param, seed):
    x, t = data(shape, seed, -1 if loss_param else None)
    layer, bottom, top = set_up(sigmoid_loss(loss_param, "loss_weight: 3"), [x, t])
    check_gradient(layer, bottom, top, check_bottom=[0])


def test_loss_weight_scales_loss(engine):
    x, t = data((2, 3), 3)
    layer, bottom, top = set_up(sigmoid_loss(extra="loss_weight: 2.5"), [x, t])
    loss = layer.forward(bottom, top)
    np.testing.assert_allclose(loss, 2.5 * reference(x, t, None, "BATCH_SIZE")[0], rtol=1e-5)


def test_cannot_backpropagate_to_targets(engine):
    layer, bottom, top = set_up(sigmoid_loss(), [np.ones((2, 3)), np.zeros((2, 3))])
    layer.forward(bottom, top)
    with pytest.raises(CaffeError, match='"loss".*cannot backpropagate to label inputs'):
        layer.backward(top, [True, True], bottom)
    assert not layer.allow_force_backward(1)


@pytest.mark.parametrize("shapes, message", [
    (((2, 3), (2, 4)), "same count"),
    (((2, 3), (3, 2)), "first dimension"),
])
def test_shape_errors(shapes, message):
    with pytest.raises(CaffeError, match=f'"loss".*{message}'):
        set_up(sigmoid_loss(), [np.zeros(shapes[0]), np.zeros(shapes[1])])


def test_needs_two_bottoms():
    with pytest.raises(CaffeError, match='"loss".*exactly 2 bottom'):
        set_up(sigmoid_loss(), [np.zeros((2, 3))])
