"""Softmax: forward and backward against numpy over several axes, stability, gradients, in
place; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import blob_of, layer_param, set_up


def softmax(axis=None):
    params = f"softmax_param {{ axis: {axis} }}" if axis is not None else ""
    return f'name: "prob" type: "Softmax" {params}'


def reference(x, axis):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


CASES = [((2, 10), None), ((2, 3, 4, 5), None), ((2, 3, 4, 5), 0), ((2, 3, 4, 5), 2),
         ((2, 3, 4, 5), -1), ((6,), 0)]


@pytest.mark.parametrize("shape, axis", CASES)
def test_forward(shape, axis, engine):
    x = np.random.default_rng(0).normal(scale=2, size=shape)
    layer, bottom, top = set_up(softmax(axis), [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    np.testing.assert_allclose(top[0].cpu_data, reference(x, 1 if axis is None else axis),
                               rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("shape, axis", CASES)
def test_backward(shape, axis, engine):
    """dx = y (dy - sum(dy y)) over the softmax axis, from the layer's own top."""
    rng = np.random.default_rng(4)
    x, dy = rng.normal(scale=2, size=shape), rng.normal(size=shape).astype(np.float32)
    layer, bottom, top = set_up(softmax(axis), [x])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    y = top[0].cpu_data.astype(np.float64)
    want = y * (dy - (dy * y).sum(axis=1 if axis is None else axis, keepdims=True))
    np.testing.assert_allclose(bottom[0].cpu_diff, want, rtol=1e-5, atol=1e-6)


def test_large_inputs_are_stable(engine):
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -1000.0]])
    layer, bottom, top = set_up(softmax(), [x])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, reference(x, 1), rtol=1e-6)


@pytest.mark.parametrize("engine, shape, axis, seed", engine_cases(
    [case + (1,) for case in CASES],
    [((2, 3, 4), 1, 5), ((3, 2, 2), 2, 5)] + [case + (1,) for case in CASES], unpack=True),
    indirect=["engine"])
def test_gradient(engine, shape, axis, seed):
    x = np.random.default_rng(seed).normal(size=shape)
    layer, bottom, top = set_up(softmax(axis), [x])
    check_gradient(layer, bottom, top)


def test_in_place(engine):
    x = np.random.default_rng(2).normal(size=(3, 4, 2))
    dy = np.random.default_rng(3).normal(size=(3, 4, 2))
    layer, bottom, top = set_up(softmax(), [x])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    blob = blob_of(x)
    in_place = create_layer(layer_param(softmax()))
    in_place.setup([blob], [blob])
    in_place.forward([blob], [blob])
    blob.diff[...] = dy
    in_place.backward([blob], [True], [blob])
    np.testing.assert_allclose(blob.data, top[0].data, rtol=1e-6)
    np.testing.assert_allclose(blob.diff, bottom[0].diff, rtol=1e-5, atol=1e-7)


def test_bad_axis():
    with pytest.raises(CaffeError, match='"prob".*axis 4'):
        set_up(softmax(4), [np.ones((2, 3))])


def test_needs_one_bottom():
    with pytest.raises(CaffeError, match='"prob".*exactly 1 bottom'):
        set_up(softmax(), [np.ones(2), np.ones(2)])
