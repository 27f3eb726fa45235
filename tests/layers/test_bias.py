"""Bias: learnable and bottom forms over axis/num_axes, forward and backward against numpy,
gradients, in place, errors; on both engines."""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device
from tests.layer_helpers import blob_of, broadcast, layer_param, set_up, uniform_data
from tests.numerics import close_to

SHAPE = (2, 3, 4, 5)


def bias(params=""):
    return f'name: "bias" type: "Bias" bias_param {{ {params} }}'


LEARNABLE = [  # params, expected blob shape, axis the blob starts at
    ("", (3,), 1),
    ("axis: 1 num_axes: 2", (3, 4), 1),
    ("axis: 0 num_axes: -1", SHAPE, 0),
    ("axis: 2 num_axes: -1", (4, 5), 2),
    ("axis: -1", (5,), 3),
    ("axis: -2 num_axes: 2", (4, 5), 2),
    ("num_axes: 0", (), 0),
    ("axis: 3 num_axes: 0", (), 0),
]

FILLED = 'filler { type: "uniform" min: -1 max: 1 } '


def summed_to(dy, axis, ndim):
    """dy summed over every axis but the ``ndim`` from ``axis`` on (the bias's gradient)."""
    dy = np.asarray(dy, np.float64)
    return dy.sum(axis=tuple(range(axis)) + tuple(range(axis + ndim, dy.ndim)))


@pytest.mark.parametrize("params, blob_shape, axis", LEARNABLE)
def test_learnable_forward(params, blob_shape, axis, engine):
    backend.set_random_seed(0)
    x = uniform_data(SHAPE)
    layer, bottom, top = set_up(bias(FILLED + params), [x])
    assert layer.blobs[0].shape == blob_shape
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    expected = x + broadcast(layer.blobs[0].cpu_data, x.ndim, axis)
    close_to(top[0].cpu_data, expected, rtol=1e-6)


@pytest.mark.parametrize("params, blob_shape, axis", LEARNABLE)
def test_learnable_backward(params, blob_shape, axis, engine):
    """dx = dy; the blob's gradient, dy summed over the axes it does not span, accumulates."""
    backend.set_random_seed(0)
    layer, bottom, top = set_up(bias(FILLED + params), [uniform_data(SHAPE)])
    dy = uniform_data(SHAPE, seed=2)
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.blobs[0].diff[...] = 0.5
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].cpu_diff, dy)
    np.testing.assert_allclose(layer.blobs[0].cpu_diff,
                               0.5 + summed_to(dy, axis, len(blob_shape)), rtol=1e-5,
                               atol=1e-6)


def test_default_filler_is_zero():
    layer, bottom, top = set_up(bias(), [uniform_data(SHAPE)])
    assert np.all(layer.blobs[0].data == 0)


BOTTOM_FORM = [  # params, bias shape, axis it lines up with
    ("", (3,), 1),
    ("axis: 0", (2, 3), 0),
    ("axis: 1", (3, 4, 5), 1),
    ("axis: -1", (5,), 3),
    ("axis: 0", SHAPE, 0),
    ("axis: 2", (), 0),
]


@pytest.mark.parametrize("params, bias_shape, axis", BOTTOM_FORM)
def test_bottom_form_forward(params, bias_shape, axis, engine):
    x, b = uniform_data(SHAPE), uniform_data(bias_shape, seed=1)
    layer, bottom, top = set_up(bias(params), [x, b])
    assert layer.blobs == []
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    close_to(top[0].cpu_data, x + broadcast(b, x.ndim, axis), rtol=1e-6)


@pytest.mark.parametrize("params, bias_shape, axis", BOTTOM_FORM)
@pytest.mark.parametrize("down", [[True, True], [False, True]])
def test_bottom_form_backward(params, bias_shape, axis, down, engine):
    """dx = dy; the bias bottom gets dy summed over the axes it does not span; a bottom not
    propagated to keeps its diff."""
    x, b, dy = uniform_data(SHAPE), uniform_data(bias_shape, seed=1), uniform_data(SHAPE, 2)
    layer, bottom, top = set_up(bias(params), [x, b])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    bottom[0].diff[...] = 7
    layer.backward(top, down, bottom)
    np.testing.assert_array_equal(bottom[0].cpu_diff, dy if down[0] else np.full(SHAPE, 7))
    np.testing.assert_allclose(bottom[1].cpu_diff, summed_to(dy, axis, len(bias_shape)),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("params, blob_shape, axis", LEARNABLE)
def test_learnable_gradient(engine, params, blob_shape, axis):
    backend.set_random_seed(0)
    layer, bottom, top = set_up(bias(FILLED + params), [uniform_data(SHAPE)])
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize("params, bias_shape, axis", BOTTOM_FORM)
def test_bottom_form_gradient(engine, params, bias_shape, axis):
    bottoms = [uniform_data(SHAPE), uniform_data(bias_shape, seed=1)]
    layer, bottom, top = set_up(bias(params), bottoms)
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top)


def test_param_gradient_accumulates_bottom_gradient_overwrites(engine):
    layer, bottom, top = set_up(bias(), [uniform_data((2, 3, 2))])
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    layer.blobs[0].diff[...] = 10
    layer.backward(top, [True], bottom)
    np.testing.assert_allclose(layer.blobs[0].cpu_diff, 14)
    np.testing.assert_allclose(bottom[0].cpu_diff, 1)

    layer, bottom, top = set_up(bias(), [uniform_data((2, 3, 2)), uniform_data((3,))])
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    bottom[1].diff[...] = 10
    layer.backward(top, [False, True], bottom)
    np.testing.assert_allclose(bottom[1].cpu_diff, 4)


@pytest.mark.parametrize("params, bias_shape, axis", [("", (3,), 1),
                                                      (FILLED + "axis: 1 num_axes: 2", None, 1)])
def test_in_place(params, bias_shape, axis, engine):
    """The bottom form (bias_shape given) and the learnable form, top = bottom[0]."""
    backend.set_random_seed(0)
    x = uniform_data(SHAPE)
    layer = create_layer(layer_param(bias(params)))
    blobs = [blob_of(x)] + ([] if bias_shape is None else [blob_of(uniform_data(bias_shape, 1))])
    blob = blobs[0]
    layer.setup(blobs, [blob])
    b_blob = blobs[1] if bias_shape is not None else layer.blobs[0]
    b = b_blob.cpu_data.copy()
    b_blob.diff[...] = 0
    layer.forward(blobs, [blob])
    assert_tops_on_device(layer, [blob])
    close_to(blob.cpu_data, x + broadcast(b, x.ndim, axis), rtol=1e-6)
    dy = uniform_data(SHAPE, seed=2)
    blob.diff[...] = dy
    layer.backward([blob], [True] * len(blobs), blobs)
    np.testing.assert_allclose(blob.cpu_diff, dy)
    close_to(b_blob.cpu_diff, summed_to(dy, axis, b.ndim), rtol=1e-5)


def test_given_blob_is_used():
    text = bias() + " blobs { shape { dim: 3 } data: 1 data: 2 data: 3 }"
    layer, bottom, top = set_up(text, [np.zeros((2, 3))])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, [[1, 2, 3], [1, 2, 3]])


@pytest.mark.parametrize("params, bottoms, message", [
    ("num_axes: -2", [SHAPE], "num_axes must be non-negative"),
    ("axis: 2 num_axes: 3", [SHAPE], "extends past"),
    ("axis: 4", [SHAPE], "axis 4 out of range"),
    ("", [SHAPE, (4,)], "dimension mismatch"),
    ("axis: 2", [SHAPE, (4, 5, 1)], "extends past"),
])
def test_errors_name_the_layer(params, bottoms, message):
    with pytest.raises(CaffeError, match=f'"bias".*{message}'):
        set_up(bias(params), [uniform_data(shape) for shape in bottoms])
