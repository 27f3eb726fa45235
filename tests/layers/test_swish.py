"""Swish: forward against numpy for several betas, gradients, Caffe's backward formula,
in-place use, large inputs; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import (SHIFT_DOWN, assert_in_place_matches, set_up)

SHAPES = [(2, 3, 4, 5), (7,), (3, 6)]
BETAS = [1.0, 2.0, 0.5]
ALL_BETAS = BETAS + [-1.5]


def swish(beta=None):
    param = f" swish_param {{ beta: {beta} }}" if beta is not None else ""
    return f'name: "swish" type: "Swish"{param}'


def reference(x, beta):
    x = np.asarray(x, np.float64)
    return x / (1.0 + np.exp(-beta * x))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("beta", ALL_BETAS)
def test_forward(shape, beta, engine):
    x = np.random.default_rng(0).normal(scale=2.0, size=shape).astype(np.float32)
    layer, bottom, top = set_up(swish(beta), [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    np.testing.assert_allclose(top[0].cpu_data, reference(x, beta), rtol=1e-6, atol=1e-7)


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


def derivative(x, beta):
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore"):
        s = 1.0 / (1.0 + np.exp(-beta * x))
    return s + beta * x * s * (1 - s)


@pytest.mark.parametrize("shape", [(25,), (2, 3, 4, 5), (7,)])
@pytest.mark.parametrize("beta", ALL_BETAS)
def test_backward_against_the_derivative(beta, shape, engine):
    x = np.linspace(-6, 6, int(np.prod(shape))).reshape(shape)
    dy = np.full(shape, 1.5) if shape == (25,) else np.random.default_rng(5).normal(size=shape)
    layer, bottom, top = set_up(swish(beta), [x])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].cpu_diff, dy * derivative(x, beta), rtol=1e-5,
                               atol=1e-7)


def test_large_inputs(engine):
    x = np.array([-1e4, -100.0, -20.0, 0.0, 20.0, 100.0, 1e4])
    layer, bottom, top = set_up(swish(2.0), [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    with np.errstate(over="ignore"):
        want = reference(x, 2.0)
    np.testing.assert_allclose(top[0].cpu_data, want, rtol=1e-6, atol=1e-7)
    top[0].diff[...] = 1.5
    layer.backward(top, [True], bottom)
    assert np.all(np.isfinite(bottom[0].cpu_diff))
    np.testing.assert_allclose(bottom[0].cpu_diff, 1.5 * derivative(x, 2.0), rtol=1e-5,
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
