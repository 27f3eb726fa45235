"""ELU: forward and backward against numpy for several alphas (a zero input among them),
gradients away from the kink, in-place use (exact for any alpha, also where Caffe's in-place
backward would misread the sign); on both engines."""
import numpy as np
import pytest

from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import (SHIFT_DOWN, assert_in_place_matches, set_up)

SHAPES = [(2, 3, 4, 5), (7,), (3, 6)]
ALPHAS = [0.5, 1.0, 2.0]


def elu(alpha=None):
    param = f" elu_param {{ alpha: {alpha} }}" if alpha is not None else ""
    return f'name: "elu" type: "ELU"{param}'


def reference(x, alpha):
    x = np.asarray(x, np.float64)
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


@pytest.mark.parametrize("engine, shape, alpha", engine_cases(
    [(shape, alpha) for alpha in ALPHAS + [-0.7] for shape in SHAPES],
    [(shape, alpha) for alpha in ALPHAS + [-0.7] for shape in [(2, 3, 4, 5), (7,)]],
    unpack=True), indirect=["engine"])
def test_forward_backward(engine, shape, alpha):
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape).astype(np.float32)
    x.flat[0] = 0.0  # takes the negative branch: dx = dy * (alpha + 0)
    dy = np.random.default_rng(4).normal(size=shape).astype(np.float32)
    layer, bottom, top = set_up(elu(alpha), [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    y = top[0].cpu_data.copy()
    expected = reference(x, np.float32(alpha))
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-7)
    positive = x > 0
    np.testing.assert_array_equal(y[positive], x[positive])
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    slope = np.where(x > 0, 1.0, np.float32(alpha) + expected)
    np.testing.assert_allclose(bottom[0].cpu_diff, dy * slope, rtol=1e-5, atol=1e-7)
    assert bottom[0].cpu_diff.flat[0] == np.float32(alpha) * dy.flat[0]


def test_default_alpha_is_one():
    x = np.array([-1.0, 2.0])
    layer, bottom, top = set_up(elu(), [x])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, [np.expm1(-1.0), 2.0], rtol=1e-6)


@pytest.mark.parametrize("engine, shape, alpha", engine_cases(
    [(shape, alpha) for alpha in ALPHAS for shape in SHAPES],
    [((2, 3, 4), alpha) for alpha in (0.5, 2.0)], unpack=True), indirect=["engine"])
def test_gradient(engine, shape, alpha):
    x = np.random.default_rng(1).normal(size=shape)
    layer, bottom, top = set_up(elu(alpha), [x])
    check_gradient(layer, bottom, top, threshold=1e-3, kink=0.0, kink_range=0.01)


def test_backward_at_zero_uses_negative_branch():
    layer, bottom, top = set_up(elu(0.5), [np.array([0.0, 1.0])])
    layer.forward(bottom, top)
    top[0].diff[...] = 2.0
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, [1.0, 2.0])  # 2 * (alpha + y(0) = 0.5)


@pytest.mark.parametrize("engine, alpha", engine_cases([0.5, 1.0, -0.7], [0.5, -0.7]),
                         indirect=["engine"])
def test_in_place_matches_out_of_place(engine, alpha):
    rng = np.random.default_rng(2)
    x, dy = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    assert_in_place_matches([elu(alpha)], x, dy)
    assert_in_place_matches([elu(alpha), SHIFT_DOWN], x, dy)


def test_in_place_followed_by_in_place_layer():
    """A later in-place layer overwrites this layer's top data, which backward reads."""
    rng = np.random.default_rng(4)
    x, dy = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    assert_in_place_matches([elu(0.5), SHIFT_DOWN], x, dy)
