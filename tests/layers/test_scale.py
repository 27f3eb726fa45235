"""Scale: learnable and bottom forms over axis/num_axes, bias_term, forward and backward against
numpy, gradients, in place, errors; on both engines."""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import blob_of, broadcast, layer_param, set_up, uniform_data
from tests.numerics import close_to

SHAPE = (2, 3, 4, 5)
FILLERS = ('filler { type: "uniform" min: -1 max: 1 } '
           'bias_filler { type: "uniform" min: -1 max: 1 } ')


def scale(params=""):
    return f'name: "scale" type: "Scale" scale_param {{ {params} }}'


LEARNABLE = [  # params, expected blob shape, axis the blob starts at
    ("", (3,), 1),
    ("axis: 1 num_axes: 2", (3, 4), 1),
    ("axis: 0 num_axes: -1", SHAPE, 0),
    ("axis: 2 num_axes: -1", (4, 5), 2),
    ("axis: -1", (5,), 3),
    ("num_axes: 0", (), 0),
    ("axis: 2 num_axes: 0", (), 0),
]


@pytest.mark.parametrize("bias_term", [False, True])
@pytest.mark.parametrize("params, blob_shape, axis", LEARNABLE)
def test_learnable_forward(params, blob_shape, axis, bias_term, engine):
    backend.set_random_seed(0)
    x = uniform_data(SHAPE)
    extra = " bias_term: true" if bias_term else ""
    layer, bottom, top = set_up(scale(FILLERS + params + extra), [x])
    assert [b.shape for b in layer.blobs] == [blob_shape] * (2 if bias_term else 1)
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    expected = x * broadcast(layer.blobs[0].cpu_data, x.ndim, axis)
    if bias_term:
        expected += broadcast(layer.blobs[1].cpu_data, x.ndim, axis)
    np.testing.assert_allclose(top[0].cpu_data, expected, rtol=1e-6, atol=1e-7)


def reduce_to(values, shape, axis):
    """Sum ``values`` over the axes a ``shape`` operand starting at ``axis`` is broadcast
    along: the gradient of that operand."""
    values = np.asarray(values, np.float64)
    outside = tuple(range(axis)) + tuple(range(axis + len(shape), values.ndim))
    return values.sum(axis=outside).reshape(shape)


@pytest.mark.parametrize("bias_term", [False, True])
@pytest.mark.parametrize("params, blob_shape, axis", LEARNABLE)
def test_learnable_backward(params, blob_shape, axis, bias_term, engine):
    backend.set_random_seed(0)
    x, dy = uniform_data(SHAPE), uniform_data(SHAPE, seed=2)
    extra = " bias_term: true" if bias_term else ""
    layer, bottom, top = set_up(scale(FILLERS + params + extra), [x])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    for blob in layer.blobs:
        blob.diff[...] = 0
    layer.backward(top, [True], bottom)
    factor = layer.blobs[0].cpu_data.astype(np.float64)
    np.testing.assert_allclose(bottom[0].cpu_diff, dy * broadcast(factor, x.ndim, axis),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layer.blobs[0].cpu_diff, reduce_to(dy * x, blob_shape, axis),
                               rtol=1e-5, atol=1e-6)
    if bias_term:
        np.testing.assert_allclose(layer.blobs[1].cpu_diff, reduce_to(dy, blob_shape, axis),
                                   rtol=1e-5, atol=1e-6)


def test_default_fillers_give_identity():
    x = uniform_data(SHAPE)
    layer, bottom, top = set_up(scale("bias_term: true"), [x])
    assert np.all(layer.blobs[0].data == 1) and np.all(layer.blobs[1].data == 0)
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, x)


BOTTOM_FORM = [  # params, scale shape, axis it lines up with
    ("", (3,), 1),
    ("axis: 0", (2, 3), 0),
    ("axis: 1", (3, 4, 5), 1),
    ("axis: -1", (5,), 3),
    ("axis: 0", SHAPE, 0),
    ("axis: 3", (), 0),
]


@pytest.mark.parametrize("bias_term", [False, True])
@pytest.mark.parametrize("params, scale_shape, axis", BOTTOM_FORM)
def test_bottom_form_forward(params, scale_shape, axis, bias_term, engine):
    backend.set_random_seed(0)
    x, s = uniform_data(SHAPE), uniform_data(scale_shape, seed=1)
    extra = " bias_term: true" if bias_term else ""
    layer, bottom, top = set_up(scale(FILLERS + params + extra), [x, s])
    # Only the bias is learnable, shaped like the scale bottom.
    assert [b.shape for b in layer.blobs] == ([scale_shape] if bias_term else [])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    expected = x * broadcast(s, x.ndim, axis)
    if bias_term:
        expected += broadcast(layer.blobs[0].cpu_data, x.ndim, axis)
    np.testing.assert_allclose(top[0].cpu_data, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("down", [[True, True], [False, True], [True, False]])
@pytest.mark.parametrize("bias_term", [False, True])
@pytest.mark.parametrize("params, scale_shape, axis", BOTTOM_FORM)
def test_bottom_form_backward(params, scale_shape, axis, bias_term, down, engine):
    """Both bottoms' gradients, each only where asked for (the other diff left alone)."""
    backend.set_random_seed(0)
    x, s, dy = uniform_data(SHAPE), uniform_data(scale_shape, seed=1), uniform_data(SHAPE, 2)
    extra = " bias_term: true" if bias_term else ""
    layer, bottom, top = set_up(scale(FILLERS + params + extra), [x, s])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    for blob in bottom:
        blob.diff[...] = 10
    for blob in layer.blobs:
        blob.diff[...] = 0
    layer.backward(top, down, bottom)
    want = [dy * broadcast(s, x.ndim, axis), reduce_to(dy * x, scale_shape, axis)]
    for blob, wanted, propagated in zip(bottom, want, down):
        if propagated:
            np.testing.assert_allclose(blob.cpu_diff, wanted, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(blob.cpu_diff, 10)
    if bias_term:
        np.testing.assert_allclose(layer.blobs[0].cpu_diff, reduce_to(dy, scale_shape, axis),
                                   rtol=1e-5, atol=1e-6)


# The GPU case: the default axis with a bias, on a smaller input (the simulator is slow).
GPU_GRADIENT = [("", (3,), 1, True, (2, 3, 2))]


@pytest.mark.parametrize("engine, params, blob_shape, axis, bias_term, shape", engine_cases(
    [case + (bias_term, SHAPE) for bias_term in (False, True) for case in LEARNABLE],
    GPU_GRADIENT, unpack=True), indirect=["engine"])
def test_learnable_gradient(engine, params, blob_shape, axis, bias_term, shape):
    backend.set_random_seed(0)
    extra = " bias_term: true" if bias_term else ""
    layer, bottom, top = set_up(scale(FILLERS + params + extra), [uniform_data(shape)])
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize("engine, params, scale_shape, axis, bias_term, shape", engine_cases(
    [case + (bias_term, SHAPE) for bias_term in (False, True) for case in BOTTOM_FORM],
    GPU_GRADIENT, unpack=True), indirect=["engine"])
def test_bottom_form_gradient(engine, params, scale_shape, axis, bias_term, shape):
    backend.set_random_seed(0)
    extra = " bias_term: true" if bias_term else ""
    layer, bottom, top = set_up(scale(FILLERS + params + extra),
                                [uniform_data(shape), uniform_data(scale_shape, seed=1)])
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top)


def test_param_gradients_accumulate(engine):
    backend.set_random_seed(0)
    x, dy = uniform_data((2, 3, 2)), uniform_data((2, 3, 2), seed=3)
    layer, bottom, top = set_up(scale(FILLERS + "bias_term: true"), [x])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    for blob in layer.blobs:
        blob.diff[...] = 10
    layer.backward(top, [True], bottom)
    np.testing.assert_allclose(layer.blobs[0].cpu_diff, 10 + (dy * x).sum(axis=(0, 2)),
                               rtol=1e-5)
    np.testing.assert_allclose(layer.blobs[1].cpu_diff, 10 + dy.sum(axis=(0, 2)),
                               rtol=1e-5)


@pytest.mark.parametrize("params, scale_shape", [("axis: 0", SHAPE), ("axis: 2", ())])
def test_scale_bottom_gradient_overwrites(params, scale_shape, engine):
    """Elementwise and scalar scale bottoms (Caffe's special cases)."""
    x, s, dy = uniform_data(SHAPE), uniform_data(scale_shape, seed=1), uniform_data(SHAPE, seed=3)
    layer, bottom, top = set_up(scale(params), [x, s])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    bottom[1].diff[...] = 10
    layer.backward(top, [True, True], bottom)
    expected = dy * x if scale_shape else (dy * x).sum()
    # atol: rtol times the data's scale, the largest term (close_to's, for the elementwise case)
    np.testing.assert_allclose(bottom[1].cpu_diff, expected, rtol=1e-5,
                               atol=1e-5 * np.abs(dy * x).max())
    close_to(bottom[0].cpu_diff, dy * s, rtol=1e-6)


@pytest.mark.parametrize("bias_term", [True, False])
@pytest.mark.parametrize("two_bottoms", [False, True])
def test_in_place_matches_out_of_place(two_bottoms, bias_term, engine):
    backend.set_random_seed(0)
    x, s, dy = uniform_data(SHAPE), uniform_data((3, 4), seed=1), uniform_data(SHAPE, seed=2)
    text = scale(FILLERS + "num_axes: 2" + (" bias_term: true" if bias_term else ""))
    bottoms = [x, s] if two_bottoms else [x]
    layer, bottom, top = set_up(text, bottoms)
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    top[0].diff[...] = dy
    layer.backward(top, [True] * len(bottoms), bottom)

    in_place = create_layer(layer_param(text))
    blob = blob_of(x)
    in_bottom = [blob, blob_of(s)] if two_bottoms else [blob]
    in_place.setup(in_bottom, [blob])
    for mine, theirs in zip(in_place.blobs, layer.blobs):
        mine.data[...] = theirs.data
    in_place.forward(in_bottom, [blob])
    assert_tops_on_device(in_place, [blob])
    close_to(blob.data, top[0].data, rtol=1e-6)
    blob.diff[...] = dy
    in_place.backward([blob], [True] * len(bottoms), in_bottom)
    close_to(blob.diff, bottom[0].diff, rtol=1e-6)
    for mine, theirs in zip(in_place.blobs, layer.blobs):
        close_to(mine.diff, theirs.diff, rtol=1e-5)
    if two_bottoms:
        close_to(in_bottom[1].diff, bottom[1].diff, rtol=1e-5)


def test_given_blobs_with_bias():
    text = (scale("bias_term: true") + " blobs { shape { dim: 2 } data: 2 data: 3 }"
            " blobs { shape { dim: 2 } data: 1 data: -1 }")
    layer, bottom, top = set_up(text, [np.ones((3, 2))])
    assert len(layer.blobs) == 2
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, [[3, 2]] * 3)
    # The internal bias layer adds the layer's own last blob.
    assert layer._bias_layer.blobs[0] is layer.blobs[1]


def test_bias_skipped_without_param_propagate_down():
    layer, bottom, top = set_up(scale("bias_term: true"), [uniform_data((2, 3))])
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    layer.param_propagate_down = [True, False]
    layer.backward(top, [False], bottom)
    assert np.all(layer.blobs[1].diff == 0)
    assert np.any(layer.blobs[0].diff != 0)


@pytest.mark.parametrize("params, bottoms, message", [
    ("num_axes: -2", [SHAPE], "num_axes must be non-negative"),
    ("axis: 2 num_axes: 3", [SHAPE], "extends past"),
    ("axis: -5", [SHAPE], "axis -5 out of range"),
    ("", [SHAPE, (4,)], "dimension mismatch"),
    ("axis: 3", [SHAPE, (5, 1)], "extends past"),
    ("bias_term: true", [SHAPE, (3, 5)], "dimension mismatch"),
])
def test_errors_name_the_layer(params, bottoms, message):
    with pytest.raises(CaffeError, match=f'"scale".*{message}'):
        set_up(scale(params), [uniform_data(shape) for shape in bottoms])


@pytest.mark.parametrize("bias_term", [False, True])
@pytest.mark.parametrize("two_bottoms", [False, True])
@pytest.mark.parametrize("params, blob_shape, axis", LEARNABLE)
@pytest.mark.parametrize("in_place", [False, True])
def test_the_forward_only_pass_is_the_forward_to_the_bit(params, blob_shape, axis,
                                                         bias_term, two_bottoms, in_place):
    """The inference plan's pass (one kernel: product, bias) gives forward's very bits."""
    backend.set_random_seed(0)
    x = uniform_data(SHAPE)
    text = scale(FILLERS + params + (" bias_term: true" if bias_term else ""))
    bottoms = [x, uniform_data(blob_shape, seed=1)] if two_bottoms else [x]
    layer, bottom, top = set_up(text, bottoms)
    layer.forward(bottom, top)
    want = top[0].data.copy()
    if in_place:
        top = [bottom[0]]
    layer.inference().forward_pass()(bottom, top)
    np.testing.assert_array_equal(top[0].data, want)


@pytest.mark.parametrize("slope", [0.0, 0.25])
def test_a_fused_relu_applies_to_the_forward_only_pass(slope):
    backend.set_random_seed(0)
    x = uniform_data(SHAPE)
    layer, bottom, top = set_up(scale(FILLERS + "bias_term: true"), [x])
    layer.forward(bottom, top)
    value = top[0].data.copy()
    layer.inference().fuse_relu(slope)
    layer.inference().forward_pass()(bottom, top)
    want = np.where(value > 0, value, value * np.float32(slope))
    np.testing.assert_array_equal(top[0].data, want)
