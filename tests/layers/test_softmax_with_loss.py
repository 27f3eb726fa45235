"""SoftmaxWithLoss: loss against numpy for every normalization (legacy flag included),
ignore_label, spatial (axis != 1) losses, the probability top, gradients and errors; on both
engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import set_up

FLT_MIN = np.finfo(np.float32).tiny


def loss_layer(loss_param="", axis=None, extra=""):
    softmax = f"softmax_param {{ axis: {axis} }}" if axis is not None else ""
    return (f'name: "loss" type: "SoftmaxWithLoss" loss_param {{ {loss_param} }} {softmax} '
            f'{extra}')


def reference(x, labels, axis, ignore, mode):
    """(loss, dx) for loss weight 1, straight from the definition."""
    x = np.moveaxis(x.astype(np.float32).astype(np.float64), axis, -1)
    outer = int(np.prod(x.shape[:axis]))
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    flat_p = p.reshape(-1, p.shape[-1])
    flat_l = labels.astype(int).ravel()
    valid = flat_l != ignore if ignore is not None else np.ones(flat_l.size, bool)
    picked = flat_p[np.arange(flat_l.size), np.where(valid, flat_l, 0)]
    total = -np.log(np.maximum(picked, FLT_MIN))[valid].sum()
    norm = max(1.0, {"FULL": flat_l.size, "VALID": valid.sum(), "BATCH_SIZE": outer,
                     "NONE": 1}[mode])
    grad = flat_p.copy()
    grad[np.arange(flat_l.size)[valid], flat_l[valid]] -= 1
    grad[~valid] = 0
    grad = np.moveaxis(grad.reshape(p.shape) / norm, -1, axis)
    return total / norm, grad


def labels_for(shape, axis, classes, seed, ignore=None, ignore_fraction=0.0):
    rng = np.random.default_rng(seed)
    label_shape = shape[:axis] + shape[axis + 1:]
    labels = rng.integers(0, classes, label_shape).astype(np.float64)
    if ignore is not None:
        labels[rng.random(label_shape) < ignore_fraction] = ignore
    return labels


MODES = ["FULL", "VALID", "BATCH_SIZE", "NONE"]
GEOMETRY = [((4, 5), 1), ((2, 3, 4, 5), 1), ((2, 4, 3), 2), ((3, 2, 4), -1)]


def run(shape, axis, loss_param, ignore, mode, seed=0, top_diff=1.0):
    canonical = axis % len(shape)
    x = np.random.default_rng(seed).normal(scale=2, size=shape)
    labels = labels_for(shape, canonical, shape[canonical], seed + 1, ignore, 0.3)
    layer, bottom, top = set_up(loss_layer(loss_param, axis), [x, labels])
    loss = layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    top[0].diff[...] = top_diff
    layer.backward(top, [True, False], bottom)
    expected_loss, expected_grad = reference(x, labels, canonical, ignore, mode)
    np.testing.assert_allclose(top[0].cpu_data, expected_loss, rtol=1e-5)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-5)
    np.testing.assert_allclose(bottom[0].cpu_diff, top_diff * expected_grad, rtol=1e-4,
                               atol=1e-6)


@pytest.mark.parametrize("engine, shape, axis, mode, ignore", engine_cases(
    [(shape, axis, mode, ignore) for ignore in (None, 1, -1) for mode in MODES
     for shape, axis in GEOMETRY],
    [((2, 4, 3), 1, mode, 1) for mode in MODES], unpack=True), indirect=["engine"])
def test_normalization_modes(engine, shape, axis, mode, ignore):
    ignore_param = f"ignore_label: {ignore}" if ignore is not None else ""
    run(shape, axis, f"normalization: {mode} {ignore_param}", ignore, mode)


@pytest.mark.parametrize("normalize, mode", [("true", "VALID"), ("false", "BATCH_SIZE")])
def test_legacy_normalize(normalize, mode):
    run((2, 4, 3), 1, f"normalize: {normalize} ignore_label: 0", 0, mode)


def test_explicit_normalization_beats_legacy_flag():
    run((2, 4, 3), 1, "normalize: false normalization: FULL ignore_label: 0", 0, "FULL")


def test_default_is_valid():
    run((6, 4), 1, "ignore_label: 2", 2, "VALID")


@pytest.mark.parametrize("shape, axis", GEOMETRY)
@pytest.mark.parametrize("loss_param, ignore, mode", [
    ("", None, "VALID"), ("normalization: FULL ignore_label: 1", 1, "FULL"),
    ("normalization: VALID ignore_label: -1", -1, "VALID"),
    ("normalization: BATCH_SIZE", None, "BATCH_SIZE"),
    ("normalization: NONE ignore_label: 0", 0, "NONE"),
    ("normalize: false ignore_label: 2", 2, "BATCH_SIZE")])
def test_loss_param_forms(shape, axis, loss_param, ignore, mode, engine):
    """The default, the explicit normalizations and the legacy flag, each with its own
    ignore_label, on every geometry, backward from a top diff other than 1."""
    run(shape, axis, loss_param, ignore, mode, seed=5, top_diff=1.5)


def test_all_ignored_gives_zero_loss_and_gradient(engine):
    x = np.random.default_rng(0).normal(size=(3, 4))
    layer, bottom, top = set_up(loss_layer("ignore_label: 7"), [x, np.full(3, 7.0)])
    layer.forward(bottom, top)
    layer.backward(top, [True, False], bottom)
    assert top[0].data == 0
    np.testing.assert_array_equal(bottom[0].diff, 0)


def test_certain_wrong_prediction_is_clamped_by_flt_min(engine):
    x = np.array([[0.0, 200.0]])
    layer, bottom, top = set_up(loss_layer(), [x, np.array([0.0])])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, -np.log(FLT_MIN), rtol=1e-6)


def test_second_top_is_the_probabilities(engine):
    x = np.random.default_rng(0).normal(size=(2, 3, 2))
    labels = np.array([[0.0, 2.0], [1.0, 1.0]])
    layer, bottom, top = set_up(loss_layer(), [x, labels], num_tops=2)
    loss = layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(top[1].cpu_data, e / e.sum(1, keepdims=True), rtol=1e-5)
    assert layer.loss_weights == [1.0, 0.0]
    # The loss and its gradient are those of the one-top layer; the probabilities' diff
    # does not reach the scores.
    expected_loss, expected_grad = reference(x, labels, 1, None, "VALID")
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-5)
    np.testing.assert_allclose(top[0].cpu_data, expected_loss, rtol=1e-5)
    top[0].diff[...] = 3.0
    top[1].diff[...] = 0
    layer.backward(top, [True, False], bottom)
    np.testing.assert_allclose(bottom[0].cpu_diff, 3.0 * expected_grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("engine, shape, axis, seed", engine_cases(
    [(shape, axis, 3) for shape, axis in GEOMETRY], [((3, 4), 1, 8), ((2, 4, 3), 2, 8)],
    unpack=True), indirect=["engine"])
def test_gradient(engine, shape, axis, seed):
    canonical = axis % len(shape)
    x = np.random.default_rng(seed).normal(size=shape)
    labels = labels_for(shape, canonical, shape[canonical], seed + 1, 0, 0.3)
    layer, bottom, top = set_up(loss_layer("ignore_label: 0", axis, "loss_weight: 2"),
                                [x, labels])
    check_gradient(layer, bottom, top, check_bottom=[0])


def test_cannot_backpropagate_to_labels(engine):
    layer, bottom, top = set_up(loss_layer(), [np.ones((2, 3)), np.zeros(2)])
    layer.forward(bottom, top)
    with pytest.raises(CaffeError, match='"loss".*cannot backpropagate to label inputs'):
        layer.backward(top, [True, True], bottom)
    assert not layer.allow_force_backward(1)


@pytest.mark.parametrize("label", [3.0, -1.0])
def test_label_out_of_range(label, engine):
    layer, bottom, top = set_up(loss_layer(), [np.ones((2, 3)), np.array([0.0, label])])
    with pytest.raises(CaffeError, match=f'"loss".*label value {int(label)} is out of range'):
        layer.forward(bottom, top)


def test_ignored_label_may_be_out_of_range(engine):
    layer, bottom, top = set_up(loss_layer("ignore_label: 255"),
                                [np.zeros((2, 3)), np.array([255.0, 1.0])])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, np.log(3), rtol=1e-6)


@pytest.mark.parametrize("shapes, message", [
    (((2, 3, 4), (2, 3)), "number of labels must match"),
    (((2, 3), (3,)), "first dimension"),
])
def test_label_count_mismatch(shapes, message):
    with pytest.raises(CaffeError, match=f'"loss".*{message}'):
        set_up(loss_layer(), [np.zeros(shapes[0]), np.zeros(shapes[1])])


@pytest.mark.parametrize("num_bottoms, num_tops, message", [
    (1, 1, "exactly 2 bottom"), (3, 1, "exactly 2 bottom"), (2, 3, "at most 2 top")])
def test_blob_counts(num_bottoms, num_tops, message):
    with pytest.raises(CaffeError, match=f'"loss".*{message}'):
        set_up(loss_layer(), [np.zeros((2, 3))] * num_bottoms, num_tops)
