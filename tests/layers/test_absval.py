"""AbsVal: forward and backward against numpy, bit for bit, gradients away from the kink,
sign(0) = 0, no in-place; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer, v1_type_name
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import blob_of, layer_param, set_up

SHAPES = [(2, 3, 4, 5), (7,), (3, 6)]
ABSVAL = 'name: "abs" type: "AbsVal"'


@pytest.mark.parametrize("shape", SHAPES)
def test_forward(shape, engine):
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    x.flat[:2] = [0.0, -0.0]
    layer, bottom, top = set_up(ABSVAL, [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    assert top[0].shape == shape
    np.testing.assert_array_equal(top[0].cpu_data, np.abs(x))


@pytest.mark.parametrize("shape", SHAPES)
def test_backward(shape, engine):
    """dx = sign(x) dy, exactly (sign(0) = 0)."""
    rng = np.random.default_rng(4)
    x, dy = rng.normal(size=shape).astype(np.float32), rng.normal(size=shape).astype(np.float32)
    x.flat[0] = 0.0
    layer, bottom, top = set_up(ABSVAL, [x])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].cpu_diff, np.sign(x) * dy)


@pytest.mark.parametrize("engine, shape", engine_cases(SHAPES, [(2, 3, 4)] + SHAPES),
                         indirect=["engine"])
def test_gradient(engine, shape):
    x = np.random.default_rng(1).normal(size=shape)
    layer, bottom, top = set_up(ABSVAL, [x])
    check_gradient(layer, bottom, top, threshold=1e-3, kink=0.0, kink_range=0.01)


def test_backward_is_sign_times_top_diff(engine):
    layer, bottom, top = set_up(ABSVAL, [np.array([-2.0, 0.0, 3.0])])
    layer.forward(bottom, top)
    top[0].diff[...] = [0.5, 7.0, -1.5]
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].cpu_diff, [-0.5, 0.0, -1.5])


def test_no_propagate_down_leaves_bottom_diff():
    layer, bottom, top = set_up(ABSVAL, [np.array([-2.0, 3.0])])
    layer.forward(bottom, top)
    bottom[0].diff[...] = 9
    top[0].diff[...] = 1
    layer.backward(top, [False], bottom)
    np.testing.assert_array_equal(bottom[0].diff, [9, 9])


def test_in_place_is_refused():
    blob = blob_of(np.ones((2, 3)))
    layer = create_layer(layer_param(ABSVAL))
    with pytest.raises(CaffeError, match='"abs".*in-place'):
        layer.setup([blob], [blob])


def test_v1_name():
    assert v1_type_name("ABSVAL") == "AbsVal"
