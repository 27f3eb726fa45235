"""kernels/cpu/batch_stats.py: BatchNorm's forward and backward with the batch's statistics,
against numpy's float32 code for the same formulas (rows summed pairwise, then the rows in
float64), to the bit; in place, on one thread and across threads; and against float64 where
the mean is far from zero."""
import numpy as np
import pytest

from pycaffe_cli.blob import read_only
from pycaffe_cli.layers.kernels.cpu import batch_stats
from tests.numerics import gamma

SHAPES = [  # (num, channels, inner)
    (4, 3, 1),                     # an InnerProduct's output: one value a row
    (2, 3, 20),
    (9, 1, 5),                     # more rows than numpy's 8 accumulators, one channel
    (3, 7, 1 << 12),               # past PARALLEL_MIN
    (1, 2, 90_000),                # rows numpy splits in pairwise halves
]
EPS = np.float32(1e-5)


def channel_mean(values):
    return values.sum(axis=2).sum(axis=0, dtype=np.float64) / (values.shape[0] * values.shape[2])


def numpy_forward(x):
    mean = channel_mean(x).astype(np.float32)
    centred = x - mean[None, :, None]
    var = channel_mean(np.square(centred)).astype(np.float32)
    std = np.sqrt(var + EPS)
    return centred / std[None, :, None], mean, var, std


def numpy_backward(dy, y, std):
    mean_dy = channel_mean(dy).astype(np.float32)[None, :, None]
    mean_dy_y = channel_mean(dy * y).astype(np.float32)[None, :, None]
    return (dy - mean_dy - mean_dy_y * y) * (np.float32(1.0) / std)[None, :, None]


def run_forward(x, in_place):
    num, channels, inner = x.shape
    y = x.copy() if in_place else np.full_like(x, np.nan)
    source = y if in_place else x
    x_norm = np.full(x.size, np.nan, np.float32)
    mean, var, std = np.full((3, channels), np.nan, np.float32)
    batch_stats.forward(read_only(source.reshape(-1)), num, channels, inner, EPS,
                        y.reshape(-1), x_norm, mean, var, std)
    return y, x_norm.reshape(x.shape), mean, var, std


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("in_place", [False, True])
def test_forward_and_backward_are_numpys_arithmetic(shape, in_place):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    want_y, want_mean, want_var, want_std = numpy_forward(x)
    y, x_norm, mean, var, std = run_forward(x, in_place)
    for got, want in [(y, want_y), (x_norm, want_y), (mean, want_mean), (var, want_var),
                      (std, want_std)]:
        np.testing.assert_array_equal(got, want)

    num, channels, inner = shape
    dx = dy.copy() if in_place else np.full_like(dy, np.nan)
    batch_stats.backward(read_only((dx if in_place else dy).reshape(-1)), x_norm.reshape(-1),
                         std, num, channels, inner, dx.reshape(-1))
    np.testing.assert_array_equal(dx, numpy_backward(dy, want_y, want_std))


def test_statistics_far_from_zero_keep_float32s_bounds():
    """A channel whose mean is 1000 standard deviations away from zero: the variance comes
    from the deviations, not from the difference of two large sums."""
    rng = np.random.default_rng(3)
    x = (1000 + rng.standard_normal((4, 2, 3000))).astype(np.float32)
    _, _, mean, var, _ = run_forward(x, False)
    exact = x.astype(np.float64)
    # each row of 3000 summed in float32 (within gamma(3000) of its absolute sum), the rows
    # and the division in float64 (far below that), then one rounding to float32
    mean_bound = gamma(3001) * np.abs(exact).mean(axis=(0, 2))
    np.testing.assert_array_less(np.abs(mean - exact.mean(axis=(0, 2))), mean_bound)
    # x - mean is exact in float32 (the two are within a factor 2: Sterbenz), then each
    # square and the rows' sums round as the mean's sums do
    want_var = np.square(exact - mean[None, :, None]).mean(axis=(0, 2))
    np.testing.assert_array_less(np.abs(var - want_var), gamma(3002) * want_var)
    np.testing.assert_allclose(want_var, 1.0, rtol=0.1)
