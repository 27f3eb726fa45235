"""Sigmoid: forward and backward against numpy, gradients, in-place use, saturation without
overflow; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import assert_in_place_matches, set_up

SIGMOID = 'name: "sig" type: "Sigmoid"'
SHAPES = [(2, 3, 4, 5), (7,), (3, 6)]


@pytest.mark.parametrize("shape", SHAPES)
def test_forward(shape, engine):
    x = np.random.default_rng(0).normal(scale=3, size=shape)
    layer, bottom, top = set_up(SIGMOID, [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    expected = 1 / (1 + np.exp(-x.astype(np.float32).astype(np.float64)))
    np.testing.assert_allclose(top[0].cpu_data, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape", SHAPES)
def test_backward(shape, engine):
    """Caffe's formula, dx = dy y (1 - y), from the layer's own top."""
    rng = np.random.default_rng(4)
    x, dy = rng.normal(scale=4, size=shape), rng.normal(size=shape).astype(np.float32)
    layer, bottom, top = set_up(SIGMOID, [x])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    y = top[0].cpu_data.astype(np.float64)
    np.testing.assert_allclose(bottom[0].cpu_diff, dy * y * (1 - y), rtol=1e-5, atol=1e-7)


def test_extreme_inputs_saturate(engine):
    layer, bottom, top = set_up(SIGMOID, [np.array([-1e4, -100.0, 0.0, 100.0, 1e4])])
    with np.errstate(all="raise"):
        layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].cpu_data, [0, 0, 0.5, 1, 1], atol=1e-30)


@pytest.mark.parametrize("engine, shape", engine_cases(SHAPES, [(2, 3, 4)] + SHAPES),
                         indirect=["engine"])
def test_gradient(engine, shape):
    x = np.random.default_rng(1).normal(size=shape)
    layer, bottom, top = set_up(SIGMOID, [x])
    check_gradient(layer, bottom, top)


def test_in_place(engine):
    x = np.random.default_rng(2).normal(size=(3, 4))
    dy = np.random.default_rng(3).normal(size=(3, 4))
    assert_in_place_matches([SIGMOID], x, dy)


def test_needs_one_top():
    with pytest.raises(CaffeError, match='"sig".*exactly 1 top'):
        set_up(SIGMOID, [np.ones(2)], num_tops=2)
