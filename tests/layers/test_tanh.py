"""TanH: forward and backward against numpy, gradients, in-place use, saturation; on both
engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import assert_in_place_matches, set_up

TANH = 'name: "tanh" type: "TanH"'
SHAPES = [(2, 3, 4, 5), (7,), (3, 6)]


@pytest.mark.parametrize("shape", SHAPES)
def test_forward(shape, engine):
    x = np.random.default_rng(0).normal(scale=2, size=shape)
    layer, bottom, top = set_up(TANH, [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    np.testing.assert_allclose(top[0].cpu_data,
                               np.tanh(x.astype(np.float32).astype(np.float64)),
                               rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape", SHAPES)
def test_backward(shape, engine):
    """Caffe's formula, dx = dy (1 - y^2), from the layer's own top."""
    rng = np.random.default_rng(4)
    x, dy = rng.normal(scale=2, size=shape), rng.normal(size=shape).astype(np.float32)
    layer, bottom, top = set_up(TANH, [x])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    y = top[0].cpu_data.astype(np.float64)
    np.testing.assert_allclose(bottom[0].cpu_diff, dy * (1 - y * y), rtol=1e-5, atol=1e-7)


def test_extreme_inputs_saturate(engine):
    layer, bottom, top = set_up(TANH, [np.array([-1e4, 0.0, 1e4])])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].cpu_data, [-1, 0, 1])


@pytest.mark.parametrize("engine, shape", engine_cases(SHAPES, [(2, 3, 4)] + SHAPES),
                         indirect=["engine"])
def test_gradient(engine, shape):
    x = np.random.default_rng(1).normal(size=shape)
    layer, bottom, top = set_up(TANH, [x])
    check_gradient(layer, bottom, top)


def test_in_place(engine):
    x = np.random.default_rng(2).normal(size=(3, 4))
    dy = np.random.default_rng(3).normal(size=(3, 4))
    assert_in_place_matches([TANH], x, dy)


def test_needs_one_bottom():
    with pytest.raises(CaffeError, match='"tanh".*exactly 1 bottom'):
        set_up(TANH, [])
