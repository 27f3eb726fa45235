"""ReLU kernels (layers/relu.py) against the numpy expressions they replace, to the bit."""
import numpy as np
import pytest

from pycaffe_cli.layers import relu

SPECIALS = [np.nan, -0.0, 0.0, np.inf, -np.inf, 1e-45, -1e-45]


def bits(array):
    return np.ascontiguousarray(array).view(np.int32)


def inputs(size, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=size).astype(np.float32)
    dy = rng.normal(size=size).astype(np.float32)
    count = min(size, len(SPECIALS))
    x[:count] = SPECIALS[:count]
    dy[size - count:] = SPECIALS[:count]     # inf / NaN diffs meet zero slopes too
    return x, dy


# Both sides of the serial / parallel switch.
SIZES = [1, 7, 1000, relu.PARALLEL_MIN - 1, relu.PARALLEL_MIN + 5]


@pytest.mark.parametrize("size", SIZES)
def test_relu_matches_numpy(size):
    x, dy = inputs(size, 0)
    y = np.full_like(x, 7.0)
    relu.relu_forward(x, y)
    np.testing.assert_array_equal(bits(y), bits(np.maximum(x, np.float32(0))))
    dx = np.full_like(x, 7.0)
    with np.errstate(invalid="ignore"):
        want = np.multiply(dy, x > 0)
    relu.relu_backward(x, dy, dx)
    np.testing.assert_array_equal(bits(dx), bits(want))


@pytest.mark.parametrize("slope", [0.1, -0.5, 2.0])
@pytest.mark.parametrize("size", SIZES)
def test_leaky_relu_matches_numpy(size, slope):
    slope = np.float32(slope)
    x, dy = inputs(size, 1)
    y = np.full_like(x, 7.0)
    relu.leaky_relu_forward(x, y, slope)
    np.testing.assert_array_equal(bits(y), bits(np.where(x > 0, x, x * slope)))
    dx = np.full_like(x, 7.0)
    with np.errstate(invalid="ignore"):
        want = np.multiply(dy, (x > 0) + slope * (x <= 0))
    relu.leaky_relu_backward(x, dy, dx, slope)
    np.testing.assert_array_equal(bits(dx), bits(want))


def test_in_place():
    x, dy = inputs(relu.PARALLEL_MIN + 3, 2)
    want = np.maximum(x, np.float32(0))
    relu.relu_forward(x, x)
    np.testing.assert_array_equal(bits(x), bits(want))
