"""InfogainLoss: loss and gradient against numpy with H from a binaryproto file and from a
third bottom, every normalization, ignore_label, axis, the probability top, agreement with
SoftmaxWithLoss for H = I, gradient checks and errors; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.blob_proto import fill_blob_proto
from pycaffe_cli.io.prototxt import write_blob_proto
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import set_up


def infogain(source=None, axis=None, loss_param="", extra=""):
    fields = [f'source: "{source}"'] if source else []
    fields += [f"axis: {axis}"] if axis is not None else []
    return (f'name: "loss" type: "InfogainLoss" infogain_loss_param {{ {" ".join(fields)} }} '
            f'loss_param {{ {loss_param} }} {extra}')


def write_matrix(path, matrix, shape=None):
    matrix = np.asarray(matrix, np.float32)
    write_blob_proto(str(path), fill_blob_proto(caffe_pb2.BlobProto(),
                                                matrix.reshape(shape or matrix.shape)))
    return str(path)


def reference(x, labels, matrix, axis, ignore, mode):
    """(loss, dx) for loss weight 1, straight from the definition."""
    x = np.moveaxis(x.astype(np.float32).astype(np.float64), axis, -1)
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    flat_p = p.reshape(-1, p.shape[-1])
    flat_l = labels.astype(int).ravel()
    valid = flat_l != ignore if ignore is not None else np.ones(flat_l.size, bool)
    rows = matrix.astype(np.float32).astype(np.float64)[np.where(valid, flat_l, 0)]
    total = -(rows * np.log(np.maximum(flat_p, 1e-20)))[valid].sum()
    outer = int(np.prod(x.shape[:axis]))
    norm = max(1.0, {"FULL": flat_l.size, "VALID": valid.sum(), "BATCH_SIZE": outer,
                     "NONE": 1}[mode])
    grad = flat_p * rows.sum(1, keepdims=True) - rows
    grad[~valid] = 0
    return total / norm, np.moveaxis(grad.reshape(p.shape) / norm, -1, axis)


def problem(shape, axis, seed, ignore=None):
    rng = np.random.default_rng(seed)
    axis %= len(shape)
    classes = shape[axis]
    x = rng.normal(scale=2, size=shape)
    label_shape = shape[:axis] + shape[axis + 1:]
    labels = rng.integers(0, classes, label_shape).astype(float)
    if ignore is not None:
        labels[rng.random(label_shape) < 0.3] = ignore
    matrix = rng.uniform(0, 1, (classes, classes))
    return x, labels, matrix


GEOMETRY = [((4, 5), 1), ((2, 3, 4), 1), ((2, 4, 3), 2), ((3, 2, 4), -1)]
MODES = ["FULL", "VALID", "BATCH_SIZE", "NONE"]


def softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def check(layer, bottom, top, x, labels, matrix, axis, ignore, mode, weight=1.0,
          top_diff=1.0):
    """Forward and backward against the reference, with the loss top's diff ``top_diff`` (a
    loss weight ``weight`` scales only the returned loss); a second top holds the
    probabilities."""
    loss = layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    top[0].diff[...] = top_diff
    if len(top) > 1:
        top[1].diff[...] = 0
    layer.backward(top, [True, False] + [False] * (len(bottom) - 2), bottom)
    expected_loss, expected_grad = reference(x, labels, matrix, axis, ignore, mode)
    assert top[0].shape == ()
    np.testing.assert_allclose(top[0].cpu_data, expected_loss, rtol=1e-5)
    np.testing.assert_allclose(loss, weight * expected_loss, rtol=1e-5)
    np.testing.assert_allclose(bottom[0].cpu_diff, top_diff * expected_grad, rtol=1e-4,
                               atol=1e-6)
    if len(top) > 1:
        np.testing.assert_allclose(top[1].cpu_data, softmax(x, axis), rtol=1e-5)


# (loss_param, normalization, ignore_label) of the GPU cases
GPU_LOSS_PARAMS = [("", "VALID", None), ("ignore_label: 1", "VALID", 1),
                   ("normalization: FULL ignore_label: 0", "FULL", 0),
                   ("normalization: BATCH_SIZE", "BATCH_SIZE", None),
                   ("normalization: NONE ignore_label: 2", "NONE", 2)]


# Layer.forward reads a weighted loss top back to the host (head SYNCED); with loss_weight 0
# the head stays AT_GPU and the top's diff, set by hand, is not the loss weight.
@pytest.mark.parametrize("engine, loss_param, mode, ignore, seed", engine_cases(
    [(f"normalization: {mode}" + ("" if ignore is None else f" ignore_label: {ignore}"),
      mode, ignore, 0) for ignore in (None, 1) for mode in MODES],
    [case + (9,) for case in GPU_LOSS_PARAMS], unpack=True), indirect=["engine"])
@pytest.mark.parametrize("shape, axis", GEOMETRY)
@pytest.mark.parametrize("weight, top_diff", [(None, 1.0), (0, 1.5)])
def test_matrix_from_bottom(engine, shape, axis, loss_param, mode, ignore, seed, weight,
                            top_diff):
    x, labels, matrix = problem(shape, axis, seed, ignore)
    extra = "" if weight is None else f"loss_weight: {weight}"
    layer, bottom, top = set_up(infogain(axis=axis, loss_param=loss_param, extra=extra),
                                [x, labels, matrix])
    check(layer, bottom, top, x, labels, matrix, axis % len(shape), ignore, mode,
          1.0 if weight is None else weight, top_diff)


@pytest.mark.parametrize("engine, shape, axis, legacy_4d, seed, second_top", engine_cases(
    [(shape, axis, legacy_4d, 1, False) for legacy_4d in (False, True)
     for shape, axis in GEOMETRY] + [((2, 3, 2), 1, False, 10, True)],
    [((2, 3, 2), 1, False, 10, True), ((2, 4, 3), 2, True, 1, False)], unpack=True),
    indirect=["engine"])
def test_matrix_from_file(engine, tmp_path, shape, axis, legacy_4d, seed, second_top):
    """With ``second_top``: the probabilities as a second top, both loss weights 0 and the
    loss top's diff 2."""
    x, labels, matrix = problem(shape, axis, seed, -1)
    c = matrix.shape[0]
    source = write_matrix(tmp_path / "H.binaryproto", matrix, (1, 1, c, c) if legacy_4d else None)
    extra = "loss_weight: 0 loss_weight: 0" if second_top else ""
    layer, bottom, top = set_up(infogain(source, axis, "ignore_label: -1", extra), [x, labels],
                                num_tops=2 if second_top else 1)
    weight, top_diff = (0.0, 2.0) if second_top else (1.0, 1.0)
    check(layer, bottom, top, x, labels, matrix, axis % len(shape), -1, "VALID", weight,
          top_diff)


def test_default_normalization_is_valid():
    x, labels, matrix = problem((6, 3), 1, 2, 0)
    layer, bottom, top = set_up(infogain(loss_param="ignore_label: 0"), [x, labels, matrix])
    check(layer, bottom, top, x, labels, matrix, 1, 0, "VALID")


def test_matrix_bottom_may_change_between_passes(engine):
    x, labels, matrix = problem((4, 3), 1, 3)
    layer, bottom, top = set_up(infogain(), [x, labels, matrix])
    layer.forward(bottom, top)
    bottom[2].data[...] = 2 * matrix
    check(layer, bottom, top, x, labels, 2 * matrix, 1, None, "VALID")


def test_identity_matrix_matches_softmax_with_loss():
    x, labels, _ = problem((2, 4, 3), 1, 4)
    layer, bottom, top = set_up(infogain(), [x, labels, np.eye(4)])
    softmax, s_bottom, s_top = set_up('name: "s" type: "SoftmaxWithLoss"', [x, labels])
    np.testing.assert_allclose(layer.forward(bottom, top), softmax.forward(s_bottom, s_top),
                               rtol=1e-6)
    layer.backward(top, [True, False, False], bottom)
    softmax.backward(s_top, [True, False], s_bottom)
    np.testing.assert_allclose(bottom[0].diff, s_bottom[0].diff, rtol=1e-5, atol=1e-7)


def test_second_top_is_the_probabilities(engine):
    x, labels, matrix = problem((2, 3, 2), 1, 5)
    layer, bottom, top = set_up(infogain(), [x, labels, matrix], num_tops=2)
    layer.forward(bottom, top)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(top[1].data, e / e.sum(1, keepdims=True), rtol=1e-5)
    assert layer.loss_weights == [1.0, 0.0]


@pytest.mark.parametrize("engine, shape, axis, seed", engine_cases(
    [(shape, axis, 6) for shape, axis in GEOMETRY], [((2, 4, 3), 2, 11)], unpack=True),
    indirect=["engine"])
def test_gradient_matrix_from_bottom(engine, shape, axis, seed):
    x, labels, matrix = problem(shape, axis, seed, 0)
    layer, bottom, top = set_up(infogain(axis=axis, loss_param="ignore_label: 0",
                                         extra="loss_weight: 2"), [x, labels, matrix])
    check_gradient(layer, bottom, top, check_bottom=[0])


def test_gradient_matrix_from_file(tmp_path):
    x, labels, matrix = problem((3, 4, 2), 1, 7)
    source = write_matrix(tmp_path / "H.binaryproto", matrix)
    layer, bottom, top = set_up(infogain(source, loss_param="normalization: FULL"),
                                [x, labels])
    check_gradient(layer, bottom, top, check_bottom=[0])


@pytest.mark.parametrize("down, what", [([True, True, False], "label"),
                                        ([True, False, True], "infogain")])
def test_cannot_backpropagate_to_labels_or_matrix(down, what, engine):
    x, labels, matrix = problem((2, 3), 1, 8)
    layer, bottom, top = set_up(infogain(), [x, labels, matrix])
    layer.forward(bottom, top)
    with pytest.raises(CaffeError, match=f'"loss".*cannot backpropagate to {what} inputs'):
        layer.backward(top, down, bottom)
    assert layer.allow_force_backward(0)
    assert not layer.allow_force_backward(1) and not layer.allow_force_backward(2)


def test_needs_a_matrix():
    with pytest.raises(CaffeError, match='"loss".*infogain_loss_param.source'):
        set_up(infogain(), [np.zeros((2, 3)), np.zeros(2)])


def test_missing_matrix_file(tmp_path):
    missing = tmp_path / "nope.binaryproto"
    with pytest.raises(CaffeError, match=f'"loss".*{missing.name}'):
        set_up(infogain(str(missing)), [np.zeros((2, 3)), np.zeros(2)])


@pytest.mark.parametrize("size", [2, 4])
def test_matrix_of_wrong_size(tmp_path, size):
    source = write_matrix(tmp_path / "H.binaryproto", np.eye(size))
    with pytest.raises(CaffeError, match='"loss".*must be 3x3'):
        set_up(infogain(source), [np.zeros((2, 3)), np.zeros(2)])
    with pytest.raises(CaffeError, match='"loss".*must be 3x3.*bottom\\[2\\]'):
        set_up(infogain(), [np.zeros((2, 3)), np.zeros(2), np.eye(size)])


def test_legacy_normalize_is_rejected():
    with pytest.raises(CaffeError, match='"loss".*normalize is deprecated'):
        set_up(infogain(loss_param="normalize: true"), [np.zeros((2, 3)), np.zeros(2),
                                                        np.eye(3)])


@pytest.mark.parametrize("shapes, message", [
    (((2, 3, 4), (2, 3)), "number of labels must match"),
    (((2, 3), (3,)), "first dimension"),
])
def test_label_count_mismatch(shapes, message):
    with pytest.raises(CaffeError, match=f'"loss".*{message}'):
        set_up(infogain(), [np.zeros(shapes[0]), np.zeros(shapes[1]), np.eye(3)])


def test_label_out_of_range(engine):
    layer, bottom, top = set_up(infogain(), [np.zeros((2, 3)), np.array([0.0, 3.0]), np.eye(3)])
    with pytest.raises(CaffeError, match='"loss".*label value 3 is out of range'):
        layer.forward(bottom, top)


@pytest.mark.parametrize("num_bottoms, num_tops, message", [
    (1, 1, "at least 2 bottom"), (4, 1, "at most 3 bottom"), (3, 3, "at most 2 top")])
def test_blob_counts(num_bottoms, num_tops, message):
    with pytest.raises(CaffeError, match=f'"loss".*{message}'):
        set_up(infogain(), [np.zeros((2, 3))] * num_bottoms, num_tops)
