"""BNLL (softplus): forward and backward against a float64 reference including large |x|,
gradients, Caffe's threshold in backward, in-place use; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.layers.base import v1_type_name
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import SHIFT_DOWN, assert_in_place_matches, set_up

SHAPES = [(2, 3, 4, 5), (7,), (3, 6)]
BNLL = 'name: "bnll" type: "BNLL"'


def softplus(x):
    x = np.asarray(x, np.float64)
    return np.logaddexp(0.0, x)


def softplus_grad(x, dy):
    """dy * sigmoid(min(x, 50)) (Caffe's threshold), rounded to float32."""
    e = np.exp(np.minimum(np.asarray(x, np.float64), 50.0))
    return (np.asarray(dy, np.float64) * e / (e + 1.0)).astype(np.float32)


@pytest.mark.parametrize("shape", SHAPES)
def test_forward(shape, engine):
    x = np.random.default_rng(0).normal(scale=3.0, size=shape).astype(np.float32)
    layer, bottom, top = set_up(BNLL, [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    y = top[0].cpu_data
    np.testing.assert_allclose(y, softplus(x), rtol=1e-6, atol=1e-7)
    assert np.all(y >= 0) and np.all(y >= x)


@pytest.mark.parametrize("shape", SHAPES)
def test_backward(shape, engine):
    rng = np.random.default_rng(4)
    x = rng.normal(scale=3.0, size=shape).astype(np.float32)
    dy = rng.normal(size=shape).astype(np.float32)
    layer, bottom, top = set_up(BNLL, [x])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].cpu_diff, softplus_grad(x, dy), rtol=1e-6, atol=1e-7)


def test_forward_is_stable_for_large_inputs(engine):
    x = np.array([-200.0, -60.0, -1e-3, 0.0, 1e-3, 49.0, 60.0, 200.0, 1e30])
    layer, bottom, top = set_up(BNLL, [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    y = top[0].cpu_data
    assert np.all(np.isfinite(y))
    # Caffe's log(1. + exp(x)) rounds the tiny values of very negative x to 0
    np.testing.assert_allclose(y, softplus(x.astype(np.float32)), rtol=1e-6, atol=1e-20)
    assert y[-1] == np.float32(1e30)


@pytest.mark.parametrize("engine, shape", engine_cases(SHAPES, [(2, 3, 4)] + SHAPES),
                         indirect=["engine"])
def test_gradient(engine, shape):
    x = np.random.default_rng(1).normal(size=shape)
    layer, bottom, top = set_up(BNLL, [x])
    check_gradient(layer, bottom, top, threshold=1e-3)


@pytest.mark.parametrize("x", [
    [-3.0, 0.0, 2.0, 49.0, 80.0, 1e30],
    [-200.0, -60.0, -1e-3, 0.0, 1e-3, 49.0, 60.0, 200.0, 1e30],
])
def test_backward_values_and_threshold(x, engine):
    x = np.array(x, np.float32)
    layer, bottom, top = set_up(BNLL, [x])
    layer.forward(bottom, top)
    top[0].diff[...] = 2.0
    layer.backward(top, [True], bottom)
    # (exp(-200) is 0 in float32: so is its gradient)
    np.testing.assert_allclose(bottom[0].cpu_diff, softplus_grad(x, np.full(x.shape, 2.0)),
                               rtol=1e-6)
    assert np.all(np.isfinite(bottom[0].cpu_diff))


def test_in_place_matches_out_of_place(engine):
    rng = np.random.default_rng(2)
    x, dy = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    assert_in_place_matches([BNLL], x, dy)
    assert_in_place_matches([BNLL, SHIFT_DOWN], x, dy)


def test_v1_name():
    assert v1_type_name("BNLL") == "BNLL"
