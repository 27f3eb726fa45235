"""Swish: forward against numpy for several betas, gradients, Caffe's backward formula,
in-place use; the GPU path against the CPU's."""
import numpy as np
import pytest

from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import compare_layer_modes, engine_cases
from tests.layer_helpers import (SHIFT_DOWN, assert_in_place_matches, set_up)

SHAPES = [(2, 3, 4, 5), (7,), (3, 6)]
BETAS = [1.0, 2.0, 0.5]


def swish(beta=None):
    param = f" swish_param {{ beta: {beta} }}" if beta is not None else ""
    return f'name: "swish" type: "Swish"{param}'


def reference(x, beta):
    x = np.asarray(x, np.float64)
    return x / (1.0 + np.exp(-beta * x))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("beta", BETAS)
def test_forward(shape, beta):
    x = np.random.default_rng(0).normal(scale=2.0, size=shape).astype(np.float32)
    layer, bottom, top = set_up(swish(beta), [x])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, reference(x, beta), rtol=1e-6, atol=1e-7)


def test_default_beta_is_one():
    x = np.array([-2.0, 0.0, 3.0], np.float32)
    layer, bottom, top = set_up(swish(), [x])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, reference(x, 1.0), rtol=1e-6)


@pytest.mark.parametrize("engine, shape, beta", engine_cases(
    [(shape, beta) for beta in BETAS for shape in SHAPES],
    [((2, 3, 4), beta) for beta in (1.0, 2.0)], unpack=True), indirect=["engine"])
def test_gradient(engine, shape, beta):
    x = np.random.default_rng(1).normal(size=shape)
    layer, bottom, top = set_up(swish(beta), [x])
    check_gradient(layer, bottom, top, threshold=1e-3)


@pytest.mark.parametrize("beta", BETAS)
def test_backward_against_the_derivative(beta):
    x = np.linspace(-6, 6, 25)
    layer, bottom, top = set_up(swish(beta), [x])
    layer.forward(bottom, top)
    top[0].diff[...] = 1.5
    layer.backward(top, [True], bottom)
    s = 1.0 / (1.0 + np.exp(-beta * x))
    np.testing.assert_allclose(bottom[0].diff, 1.5 * (s + beta * x * s * (1 - s)), rtol=1e-5,
                               atol=1e-7)


def test_in_place_matches_out_of_place(engine):
    rng = np.random.default_rng(2)
    x, dy = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    assert_in_place_matches([swish(2.0)], x, dy)
    assert_in_place_matches([swish(2.0), SHIFT_DOWN], x, dy)


def test_in_place_followed_by_in_place_layer():
    """A later in-place layer overwrites this layer's top data, which backward reads."""
    rng = np.random.default_rng(4)
    x, dy = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    assert_in_place_matches([swish(2.0), SHIFT_DOWN], x, dy)


# --- GPU mode ---------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (7,)])
@pytest.mark.parametrize("beta", BETAS + [-1.5])
def test_gpu_matches_cpu(shape, beta):
    rng = np.random.default_rng(4)
    x = rng.normal(scale=2.0, size=shape)
    compare_layer_modes(swish(beta), [x], top_diffs=[rng.normal(size=shape)])


def test_gpu_large_inputs():
    x = np.array([-1e4, -100.0, -20.0, 0.0, 20.0, 100.0, 1e4])
    compare_layer_modes(swish(2.0), [x], top_diffs=[np.full(x.shape, 1.5)])
