"""Pooling kernels add in Caffe's order: float32 sums to the bit, and MAX edge cases.

The CPU kernels scatter within a plane in row-major window order (pooling_layer.cpp's loops);
the references below are those loops in plain Python with float32 scalars.
"""
import numpy as np
import pytest

from pycaffe_cli.layers.kernels.cpu import pooling as kernels
from pycaffe_cli.layers.kernels.cpu.pooling import ave_pool, max_pool
from pycaffe_cli.layers.kernels.geometry import pool_out_size

FLT_MAX = np.finfo(np.float32).max
# (shape (P, H, W), kernel, stride, pad): overlapping windows, padding, clipped edges
CASES = [((2, 7, 6), (3, 3), (1, 1), (1, 1)), ((2, 9, 9), (3, 3), (2, 2), (0, 0)),
         ((1, 8, 7), (3, 2), (2, 1), (1, 0)), ((2, 6, 6), (2, 2), (2, 2), (0, 0)),
         ((1, 7, 9), (4, 3), (1, 2), (2, 1))]
# MAX's stride-2 2x2 and 3x3 windows run inner and border windows apart: padded, clipped on
# the far side (ceil), both, and planes with no inner window at all.
SQUARE_STRIDE_2 = [((2, 10, 11), (3, 3), (2, 2), (1, 1)), ((2, 7, 9), (2, 2), (2, 2), (1, 0)),
                   ((3, 8, 8), (3, 3), (2, 2), (0, 0)), ((1, 7, 6), (2, 2), (2, 2), (0, 1)),
                   ((2, 2, 2), (3, 3), (2, 2), (1, 1)), ((1, 1, 5), (2, 2), (2, 2), (0, 0))]


def windows(shape, kernel, stride, pad):
    """(ph, pw, rows, cols, pool_size) in row-major order (Caffe's loops)."""
    _, height, width = shape
    pooled = [pool_out_size(s, k, p, st)
              for s, k, p, st in zip((height, width), kernel, pad, stride)]
    for ph in range(pooled[0]):
        for pw in range(pooled[1]):
            h0, w0 = ph * stride[0] - pad[0], pw * stride[1] - pad[1]
            size = ((min(h0 + kernel[0], height + pad[0]) - h0)
                    * (min(w0 + kernel[1], width + pad[1]) - w0))
            yield (ph, pw, range(max(h0, 0), min(h0 + kernel[0], height)),
                   range(max(w0, 0), min(w0 + kernel[1], width)), size)


def out_shape(shape, kernel, stride, pad):
    return (shape[0],) + tuple(pool_out_size(s, k, p, st) for s, k, p, st
                               in zip(shape[1:], kernel, pad, stride))


def args(kernel, stride, pad):
    return (*kernel, *stride, *pad)


@pytest.mark.parametrize("shape, kernel, stride, pad", CASES)
def test_ave_sums_in_caffe_order(shape, kernel, stride, pad):
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape).astype(np.float32)
    top = np.empty(out_shape(shape, kernel, stride, pad), np.float32)
    kernels.ave_pool_forward(x, top, *args(kernel, stride, pad))
    top_diff = rng.normal(size=top.shape).astype(np.float32)
    bottom_diff = np.full(shape, np.nan, np.float32)
    kernels.ave_pool_backward(top_diff, bottom_diff, *args(kernel, stride, pad))
    want_top = np.empty_like(top)
    want_diff = np.zeros_like(x)
    for p in range(shape[0]):
        for ph, pw, rows, cols, size in windows(shape, kernel, stride, pad):
            total = np.float32(0)
            for h in rows:
                for w in cols:
                    total += x[p, h, w]
            want_top[p, ph, pw] = total / np.float32(size)
            share = top_diff[p, ph, pw] / np.float32(size)
            for h in rows:
                for w in cols:
                    want_diff[p, h, w] += share
    np.testing.assert_array_equal(top.view(np.int32), want_top.view(np.int32))
    np.testing.assert_array_equal(bottom_diff.view(np.int32), want_diff.view(np.int32))


@pytest.mark.parametrize("mask_dtype", [np.int32, np.float32])
@pytest.mark.parametrize("shape, kernel, stride, pad", CASES + SQUARE_STRIDE_2)
def test_max_routes_in_caffe_order(shape, kernel, stride, pad, mask_dtype):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 4, size=shape).astype(np.float32)   # many ties: first one wins
    top = np.empty(out_shape(shape, kernel, stride, pad), np.float32)
    mask = np.empty(top.shape, mask_dtype)
    kernels.max_pool_forward(x, top, mask, *args(kernel, stride, pad))
    top_diff = rng.normal(size=top.shape).astype(np.float32)
    bottom_diff = np.full(shape, np.nan, np.float32)
    kernels.max_pool_backward(top_diff, mask, bottom_diff, *args(kernel, stride, pad))
    want_diff = np.zeros_like(x)
    for p in range(shape[0]):
        for ph, pw, rows, cols, _ in windows(shape, kernel, stride, pad):
            best, index = -FLT_MAX, -1
            for h in rows:
                for w in cols:
                    if x[p, h, w] > best:
                        best, index = x[p, h, w], h * shape[2] + w
            assert top[p, ph, pw] == best and mask[p, ph, pw] == index
            want_diff[p].reshape(-1)[index] += top_diff[p, ph, pw]
    np.testing.assert_array_equal(bottom_diff.view(np.int32), want_diff.view(np.int32))


@pytest.mark.parametrize("mask_dtype", [np.int32, np.float32])
def test_max_skips_nan_and_a_window_without_a_maximum(mask_dtype):
    x = np.array([[[np.nan, 1.0, -np.inf, -np.inf], [2.0, np.nan, -np.inf, -np.inf]]],
                 np.float32)
    top = np.empty((1, 1, 2), np.float32)
    mask = np.empty((1, 1, 2), mask_dtype)
    kernels.max_pool_forward(x, top, mask, 2, 2, 2, 2, 0, 0)
    np.testing.assert_array_equal(top[0, 0], [2.0, -FLT_MAX])
    np.testing.assert_array_equal(mask[0, 0], [4, -1])
    bottom_diff = np.full(x.shape, np.nan, np.float32)
    kernels.max_pool_backward(np.ones_like(top), mask, bottom_diff, 2, 2, 2, 2, 0, 0)
    np.testing.assert_array_equal(bottom_diff[0], [[0, 0, 0, 0], [1, 0, 0, 0]])


# the last: enough clipped windows for the border pass to run on all threads
@pytest.mark.parametrize("shape, kernel, stride, pad", SQUARE_STRIDE_2 + [
    ((1000, 6, 7), (3, 3), (2, 2), (1, 1))])
def test_max_square_stride_2_windows_match_the_general_kernel(shape, kernel, stride, pad):
    """NaNs, infinities and ties anywhere in the window: the inner kernels combine each
    window's rows and must pick the same first maximum as the element-by-element scan."""
    rng = np.random.default_rng(2)
    x = rng.choice(np.array([np.nan, -np.inf, np.inf, -1, 0, 1, 2], np.float32),
                   size=shape)
    top = np.empty(out_shape(shape, kernel, stride, pad), np.float32)
    mask = np.empty(top.shape, np.int32)
    want_top, want_mask = np.empty_like(top), np.empty_like(mask)
    kernels.max_pool_forward(x, top, mask, *args(kernel, stride, pad))
    max_pool._max_pool_any(x, want_top, want_mask, *args(kernel, stride, pad))
    np.testing.assert_array_equal(top.view(np.int32), want_top.view(np.int32))
    np.testing.assert_array_equal(mask, want_mask)


@pytest.mark.parametrize("shape, kernel, stride, pad", SQUARE_STRIDE_2 + [
    ((3, 8, 6), (2, 2), (2, 2), (0, 0)), ((2, 9, 11), (3, 3), (2, 2), (0, 0))])
def test_max_values_without_the_mask_match_the_top_with_it(shape, kernel, stride, pad):
    """The inference pass's mask-free max (the last two: every window inside the plane,
    the square kernels' mask-free variant; the others: the column-maximum kernel)."""
    rng = np.random.default_rng(3)
    x = rng.choice(np.array([np.nan, -np.inf, np.inf, -1, 0, 1, 2], np.float32),
                   size=shape)
    want = np.empty(out_shape(shape, kernel, stride, pad), np.float32)
    kernels.max_pool_forward(x, want, np.empty(want.shape, np.int32), *args(kernel, stride, pad))
    top = np.full_like(want, 7)
    kernels.max_pool_forward_values(x, top, *args(kernel, stride, pad))
    np.testing.assert_array_equal(top.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("planes", [1, 8, 13, 1003])
def test_global_average_sums_each_plane_in_caffe_order(planes):
    """Global AVE pooling sums eight planes side by side (the rest one by one): each plane
    element by element, to the bit the window kernel's numbers, infinities and NaNs too."""
    rng = np.random.default_rng(planes)
    x = rng.normal(size=(planes, 13, 11)).astype(np.float32) * np.float32(1e3)
    x.reshape(-1)[::97] = np.inf
    x.reshape(-1)[::211] = np.nan
    top, want = np.full((planes, 1, 1), 7, np.float32), np.empty((planes, 1, 1), np.float32)
    kernels.ave_pool_forward(x, top, 13, 11, 1, 1, 0, 0)
    ave_pool._ave_pool_any(x, want, 13, 11, 1, 1, 0, 0)
    np.testing.assert_array_equal(top.view(np.int32), want.view(np.int32))
    sums = [np.float32(0)] * planes
    for p in range(planes):
        for value in x[p].reshape(-1):
            sums[p] = np.float32(sums[p] + value)
    np.testing.assert_array_equal(top.reshape(-1), np.array(sums, np.float32) / np.float32(143))
