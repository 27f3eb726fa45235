"""The row kernels of softmax_forward (kernels/cpu/softmax.py) give the numpy form's numbers
bit for bit: max, exp, numpy's pairwise sum, division."""
import numpy as np
import pytest

from pycaffe_cli.layers.softmax import softmax_forward


def numpy_form(x):
    """softmax over axis 1 of (outer, C, inner), as five numpy calls."""
    out = x - x.max(axis=1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    return out


def bits(array):
    return np.ascontiguousarray(array).view(np.int32)


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 10, 1), (64, 10, 1), (1, 1000, 1),
                                   (10, 1000, 1), (3, 7, 1), (2, 129, 1), (2, 8193, 1),
                                   (5, 136, 1)])
def test_rows_match_the_numpy_form(shape):
    x = np.random.default_rng(sum(shape)).normal(scale=4.0, size=shape).astype(np.float32)
    out = np.full(shape, np.nan, np.float32)
    softmax_forward(x, out)
    np.testing.assert_array_equal(bits(out), bits(numpy_form(x)))


def test_special_values_match_the_numpy_form():
    x = np.random.default_rng(0).normal(size=(6, 20, 1)).astype(np.float32)
    x[1, 3] = np.nan   # a NaN row
    x[2, 0] = np.nan   # a NaN first
    x[3, 5] = np.inf   # an infinite maximum
    x[4, :] = -np.inf  # nothing finite
    x[5, 2], x[5, 7] = 0.0, -0.0
    x[5, :] = np.minimum(x[5], 0)
    out = np.empty_like(x)
    with np.errstate(invalid="ignore"):
        softmax_forward(x, out)
        want = numpy_form(x)
    np.testing.assert_array_equal(bits(out), bits(want))


def test_in_place_rows():
    x = np.random.default_rng(1).normal(size=(4, 33, 1)).astype(np.float32)
    want = numpy_form(x)
    softmax_forward(x, x)
    np.testing.assert_array_equal(bits(x), bits(want))


def test_inner_positions_keep_the_numpy_form():
    """Softmax over channels at several positions (FCN's) is not a row: the numpy form."""
    x = np.random.default_rng(2).normal(size=(2, 5, 9)).astype(np.float32)
    out = np.empty_like(x)
    softmax_forward(x, out)
    np.testing.assert_array_equal(bits(out), bits(numpy_form(x)))
