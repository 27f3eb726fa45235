"""Flatten: merges axes [axis, end_axis]; the top aliases the bottom's data and diff; on both
engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import engine_cases
from tests.layer_helpers import blob_of, layer_param, set_up


def flatten(params=""):
    return f'name: "flat" type: "Flatten" flatten_param {{ {params} }}'


@pytest.mark.parametrize("params, expected", [
    ("", (2, 90)),
    ("axis: 0", (180,)),
    ("axis: 1 end_axis: 2", (2, 18, 5)),
    ("axis: -2", (2, 3, 30)),
    ("axis: 0 end_axis: -3", (6, 6, 5)),
    ("end_axis: 1", (2, 3, 6, 5)),
    ("axis: 0 end_axis: 2", (36, 5)),
])
def test_shapes_and_values(params, expected, engine):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 6, 5))
    dy = rng.normal(size=expected).astype(np.float32)
    layer, bottom, top = set_up(flatten(params), [x])
    if engine == "gpu":
        assert layer.forward_gpu is not None and layer.backward_gpu is not None
    # The top is the bottom's memory under another shape: forward writes nothing.
    layer.forward(bottom, top)
    assert top[0].shape == expected
    np.testing.assert_array_equal(top[0].cpu_data, x.astype(np.float32).reshape(expected))
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].cpu_diff, dy.reshape(x.shape))


def test_shares_data_and_diff():
    layer, bottom, top = set_up(flatten(), [np.ones((2, 3, 4))])
    layer.forward(bottom, top)
    top[0].diff[...] = np.arange(24).reshape(2, 12)
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, np.arange(24).reshape(2, 3, 4))
    bottom[0].data[...] = 5
    np.testing.assert_array_equal(top[0].data, 5)


def test_follows_bottom_reshape():
    layer, bottom, top = set_up(flatten(), [np.ones((2, 3, 4))])
    bottom[0].reshape((4, 5, 6))
    bottom[0].data[...] = 2
    layer.forward(bottom, top)
    assert top[0].shape == (4, 30)
    np.testing.assert_array_equal(top[0].data, 2)


@pytest.mark.parametrize("engine, shape", engine_cases([(2, 3, 2, 2)], [(2, 3, 2)]),
                         indirect=["engine"])
def test_gradient(engine, shape):
    x = np.random.default_rng(1).normal(size=shape)
    layer, bottom, top = set_up(flatten(), [x])
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize("params", ["axis: 4", "end_axis: -5", "axis: 2 end_axis: 1"])
def test_bad_axes(params):
    with pytest.raises(CaffeError, match='"flat"'):
        set_up(flatten(params), [np.ones((2, 3, 4, 5))])


def test_in_place_is_refused():
    blob = blob_of(np.ones((2, 3)))
    with pytest.raises(CaffeError, match='"flat".*in-place'):
        create_layer(layer_param(flatten())).setup([blob], [blob])
