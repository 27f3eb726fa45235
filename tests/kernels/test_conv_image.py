"""conv_image: one image's convolution in blocks, each from unfolding to bias on one thread,
against the numpy window sums; and im2col_span, the unfolding of a block's columns."""
import math

import numpy as np
import pytest

from pycaffe_cli import blas
from pycaffe_cli.blob import read_only
from pycaffe_cli.layers.kernels.cpu import conv_image
from pycaffe_cli.layers.kernels.cpu import im2col as kernels
from pycaffe_cli.layers.kernels.cpu.layout import NO_BIAS
from tests.kernels.test_im2col_kernels import out_shape, reference_im2col
from tests.layers.conv_reference import convolve
from tests.numerics import assert_within, gamma

# (channels, height, width, kernel, pad, stride, dilation, out_channels) and the way the
# product is cut on two threads, checked below so that each path stays covered.
CASES = {
    "columns, strided 7x7": ((3, 60, 60), (7, 7), (3, 3), (2, 2), (1, 1), 16, "columns"),
    "columns, 5x5": ((16, 28, 28), (5, 5), (2, 2), (1, 1), (1, 1), 32, "columns"),
    "columns, 1x1": ((64, 28, 28), (1, 1), (0, 0), (1, 1), (1, 1), 48, "columns"),
    "rows, 5x5": ((48, 7, 7), (5, 5), (2, 2), (1, 1), (1, 1), 128, "rows"),
    "rows, 1x1": ((512, 7, 7), (1, 1), (0, 0), (1, 1), (1, 1), 96, "rows"),
    "uneven window": ((5, 19, 23), (3, 2), (1, 0), (2, 3), (2, 1), 1200, "rows"),
    "one thread, small": ((4, 6, 5), (3, 3), (4, 4), (1, 1), (1, 1), 3, "serial"),
    "one output channel": ((40, 80, 80), (3, 3), (1, 1), (1, 1), (1, 1), 1, "columns"),
    "one output position": ((256, 3, 3), (3, 3), (0, 0), (1, 1), (1, 1), 1024, "rows"),
}


def how_cut(channels, height, width, kernel, pad, stride, dilation, out_channels):
    positions = math.prod(out_shape((height, width), kernel, pad, stride, dilation))
    block_m, _ = blas.split(out_channels, positions, channels * math.prod(kernel), 2)
    return "serial" if block_m == 0 else "rows" if block_m < out_channels else "columns"


def run(x, weight, bias, pad, stride, dilation, slope, workers):
    """conv_image.forward on the images ``x`` (num, channels, height, width), or on one
    image (channels, height, width)."""
    images = x if x.ndim == 4 else x[None]
    num, channels, height, width = images.shape
    out_channels = weight.shape[0]
    geometry = (channels, height, width, *weight.shape[2:], *pad, *stride, *dilation)
    col = np.full(max(1, conv_image.scratch_size(*geometry, out_channels, workers)), np.nan,
                  np.float32)
    out = np.full((num, out_channels) + out_shape((height, width), weight.shape[2:], pad,
                                                  stride, dilation), np.nan, np.float32)
    # read-only weights and bias, as the layer passes its blobs' views (one compile)
    conv_image.forward(images.reshape(-1), num, *geometry, read_only(weight.reshape(-1)),
                       out_channels, NO_BIAS if bias is None else read_only(bias),
                       bias is not None, np.float32(slope or 0), slope is not None, col,
                       out.reshape(-1), workers)
    return out if x.ndim == 4 else out[0]


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("bias, slope", [(False, None), (True, None), (True, 0.0),
                                         (True, 0.25)])
def test_blocks_give_the_convolution(name, workers, bias, slope):
    shape, kernel, pad, stride, dilation, out_channels, cut = CASES[name]
    assert how_cut(*shape, kernel, pad, stride, dilation, out_channels) == cut
    rng = np.random.default_rng(len(name) * 7 + workers)
    x = rng.standard_normal(shape).astype(np.float32)
    weight = rng.standard_normal((out_channels, shape[0]) + kernel).astype(np.float32)
    b = rng.standard_normal(out_channels).astype(np.float32) if bias else None
    got = run(x, weight, b, pad, stride, dilation, slope, workers)
    exact = convolve(x[None], weight, b, pad, stride, dilation, 1)[0]
    # The float32 sum of K products and the bias, in any order (ReLU only shrinks errors).
    terms = convolve(np.abs(x[None]), np.abs(weight), None if b is None else np.abs(b), pad,
                     stride, dilation, 1)[0]
    bound = gamma(weight[0].size + 1) * terms
    if slope is not None:
        exact = np.where(exact > 0, exact, exact * slope)
    assert_within(got, exact, bound, name)


@pytest.mark.parametrize("name", ["columns, strided 7x7", "rows, 5x5", "columns, 1x1",
                                  "one thread, small"])
def test_images_one_after_the_other_are_each_image_alone(name):
    """Several images: each image's output the bits of that image run alone (the same
    blocks, cut the same way, each block's thread its own scratch)."""
    shape, kernel, pad, stride, dilation, out_channels, _ = CASES[name]
    rng = np.random.default_rng(17)
    x = rng.standard_normal((3,) + shape).astype(np.float32)
    weight = rng.standard_normal((out_channels, shape[0]) + kernel).astype(np.float32)
    b = rng.standard_normal(out_channels).astype(np.float32)
    got = run(x, weight, b, pad, stride, dilation, 0.0, 2)
    for n in range(3):
        alone = run(x[n], weight, b, pad, stride, dilation, 0.0, 2)
        np.testing.assert_array_equal(got[n].view(np.uint32), alone.view(np.uint32))


@pytest.mark.parametrize("first, stop", [(0, 1), (0, 35), (3, 4), (5, 40), (29, 70),
                                         (66, 70), (0, 70)])
@pytest.mark.parametrize("geometry", [((3, 2), (1, 0), (2, 3), (2, 1)),
                                      ((3, 3), (2, 2), (1, 1), (1, 1)),
                                      ((1, 1), (0, 0), (1, 1), (1, 1))])
def test_a_span_of_columns_is_that_part_of_im2col(first, stop, geometry):
    kernel, pad, stride, dilation = geometry
    x = np.random.default_rng(3).standard_normal((1, 2, 13, 16)).astype(np.float32)
    out = out_shape(x.shape[2:], kernel, pad, stride, dilation)
    full = reference_im2col(x, kernel, pad, stride, dilation).reshape(-1, math.prod(out))
    first = min(first, full.shape[1] - 1)  # spans past the end: the last columns
    stop = min(max(stop, first + 1), full.shape[1])
    ranges = kernels.window_ranges(13, 16, *kernel, *pad, *stride, *dilation, *out)
    lead = stop - first + 3
    col = np.full(full.shape[0] * lead, np.nan, np.float32)
    kernels.im2col_span(x.reshape(-1), 2, 13, 16, *kernel, *pad, *stride, *dilation, out[1],
                        *ranges, first, stop, col, lead)
    col = col.reshape(full.shape[0], lead)
    np.testing.assert_array_equal(col[:, :stop - first], full[:, first:stop])
    assert np.isnan(col[:, stop - first:]).all()
