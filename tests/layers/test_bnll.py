"""BNLL (softplus): forward against a float64 reference including large |x|, gradients,
Caffe's threshold in backward, in-place use; the GPU path against the CPU's."""
import numpy as np
import pytest

from pycaffe_cli.layers.base import v1_type_name
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import compare_layer_modes, engine_cases
from tests.layer_helpers import SHIFT_DOWN, assert_in_place_matches, set_up

SHAPES = [(2, 3, 4, 5), (7,), (3, 6)]
BNLL = 'name: "bnll" type: "BNLL"'


def softplus(x):
    x = np.asarray(x, np.float64)
    return np.logaddexp(0.0, x)


@pytest.mark.parametrize("shape", SHAPES)
def test_forward(shape):
    x = np.random.default_rng(0).normal(scale=3.0, size=shape).astype(np.float32)
    layer, bottom, top = set_up(BNLL, [x])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, softplus(x), rtol=1e-6, atol=1e-7)
    assert np.all(top[0].data >= 0) and np.all(top[0].data >= x)


def test_forward_is_stable_for_large_inputs():
    x = np.array([-200.0, -60.0, -1e-3, 0.0, 1e-3, 60.0, 200.0, 1e30])
    layer, bottom, top = set_up(BNLL, [x])
    layer.forward(bottom, top)
    assert np.all(np.isfinite(top[0].data))
    # Caffe's log(1. + exp(x)) rounds the tiny values of very negative x to 0
    np.testing.assert_allclose(top[0].data, softplus(x.astype(np.float32)), rtol=1e-6,
                               atol=1e-20)
    assert top[0].data[-1] == np.float32(1e30)


@pytest.mark.parametrize("engine, shape", engine_cases(SHAPES, [(2, 3, 4)]), indirect=["engine"])
def test_gradient(engine, shape):
    x = np.random.default_rng(1).normal(size=shape)
    layer, bottom, top = set_up(BNLL, [x])
    check_gradient(layer, bottom, top, threshold=1e-3)


def test_backward_values_and_threshold():
    x = np.array([-3.0, 0.0, 2.0, 49.0, 80.0, 1e30], np.float32)
    layer, bottom, top = set_up(BNLL, [x])
    layer.forward(bottom, top)
    top[0].diff[...] = 2.0
    layer.backward(top, [True], bottom)
    e = np.exp(np.minimum(x.astype(np.float64), 50.0))
    np.testing.assert_allclose(bottom[0].diff, 2.0 * e / (e + 1.0), rtol=1e-6)
    assert np.all(np.isfinite(bottom[0].diff))


def test_in_place_matches_out_of_place(engine):
    rng = np.random.default_rng(2)
    x, dy = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    assert_in_place_matches([BNLL], x, dy)
    assert_in_place_matches([BNLL, SHIFT_DOWN], x, dy)


def test_v1_name():
    assert v1_type_name("BNLL") == "BNLL"


# --- GPU mode ---------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES)
def test_gpu_matches_cpu(shape):
    rng = np.random.default_rng(4)
    x = rng.normal(scale=3.0, size=shape)
    compare_layer_modes(BNLL, [x], top_diffs=[rng.normal(size=shape)])


def test_gpu_large_inputs_and_threshold():
    x = np.array([-200.0, -60.0, -1e-3, 0.0, 1e-3, 49.0, 60.0, 200.0, 1e30])
    _, gpu, _, grads = compare_layer_modes(BNLL, [x], top_diffs=[np.full(x.shape, 2.0)])
    assert gpu[0][-1] == np.float32(1e30) and np.all(np.isfinite(grads[0]))
