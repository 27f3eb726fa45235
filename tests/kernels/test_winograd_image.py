"""winograd_image: one image's Winograd F(4x4, 3x3) in blocks, each from input to output
transform on one thread, against the window sums within the proven float32 bound."""
import numpy as np
import pytest

from pycaffe_cli import blas
from pycaffe_cli.blob import read_only
from pycaffe_cli.layers.kernels.cpu import winograd, winograd_image
from pycaffe_cli.layers.kernels.cpu.layout import NO_BIAS
from tests.layers.test_winograd_convolution import reference
from tests.layers.winograd_reference import winograd_bound
from tests.numerics import assert_within

# (channels, height, width, pad, out_channels) and how two threads cut the product, checked
# below so that each path stays covered.
CASES = {
    "tiles": ((32, 34, 34, 1, 24), "columns"),
    "tiles, partial block": ((40, 30, 21, 1, 32), "columns"),
    "channels": ((64, 14, 14, 1, 96), "rows"),
    "channels, partial block, no pad": ((100, 9, 11, 0, 300), "rows"),
    "one thread, small": ((5, 9, 11, 1, 7), "serial"),
}


def how_cut(channels, height, width, pad, out_channels):
    tiles = np.prod(winograd.tile_counts(height + 2 * pad - 2, width + 2 * pad - 2))
    block_m, _ = blas.split(out_channels, int(tiles), winograd.POINTS * channels, 2)
    return "serial" if block_m == 0 else "rows" if block_m < out_channels else "columns"


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("with_bias, slope", [(False, None), (True, None), (True, 0.0),
                                              (True, 0.25)])
def test_blocks_give_the_convolution(name, workers, with_bias, slope):
    (channels, height, width, pad, out_channels), cut = CASES[name]
    assert how_cut(channels, height, width, pad, out_channels) == cut
    rng = np.random.default_rng(len(name) + workers)
    x = rng.standard_normal((1, channels, height, width)).astype(np.float32)
    weights = rng.standard_normal((out_channels, channels, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(out_channels).astype(np.float32) if with_bias else None
    v_size, m_size = winograd_image.scratch_sizes(channels, height, width, pad, pad,
                                                  out_channels, workers)
    v, m = (np.full(max(size, 1), np.nan, np.float32) for size in (v_size, m_size))
    out = np.full((out_channels, height + 2 * pad - 2, width + 2 * pad - 2), np.nan,
                  np.float32)
    winograd_image.forward(x.ravel(), channels, height, width, pad, pad,
                           winograd.transform_weights(weights), out_channels,
                           NO_BIAS if bias is None else read_only(bias), with_bias,
                           np.float32(slope or 0), slope is not None, out.ravel(), v, m,
                           workers)
    assert_within(out, reference(x, weights, bias, pad, slope)[0],
                  winograd_bound(x, weights, bias, pad)[0], name)
