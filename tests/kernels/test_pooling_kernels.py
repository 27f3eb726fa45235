"""Pooling kernels against the plain-numpy window-loop references."""
import itertools

import numpy as np
import pytest

from pycaffe_cli.layers.kernels.cpu import pooling as kernels
from pycaffe_cli.layers.kernels.geometry import pool_out_size
from tests.kernels import reference
from tests.layer_helpers import no_ties

# (kernel, stride, pad) per axis; kernel 2/3, stride 1/2, pad 0/1, plus non-square windows.
SQUARE = [((k, k), (s, s), (p, p)) for k, s, p in itertools.product((2, 3), (1, 2), (0, 1))]
RECT = [((3, 2), (1, 2), (1, 0)), ((2, 3), (2, 1), (0, 1)), ((1, 3), (1, 3), (0, 2))]
GEOMETRIES = SQUARE + RECT
SHAPES = [(3, 7, 6), (2, 5, 9), (1, 1, 1 + 3)]


def pooled_shape(shape, kernel, stride, pad):
    return (shape[0],) + tuple(pool_out_size(s, k, p, st) for s, k, p, st
                               in zip(shape[1:], kernel, pad, stride))


def geometry_args(kernel, stride, pad):
    return (*kernel, *stride, *pad)


def fits(shape, kernel, pad):
    return all(k <= s + 2 * p for s, k, p in zip(shape[1:], kernel, pad))


CASES = [(s, g) for s in SHAPES for g in GEOMETRIES if fits(s, g[0], g[2])]


@pytest.mark.parametrize("shape, geometry", CASES)
@pytest.mark.parametrize("mask_dtype", [np.int32, np.float32])
def test_max_forward_and_backward(shape, geometry, mask_dtype):
    kernel, stride, pad = geometry
    rng = np.random.default_rng(0)
    x = no_ties(rng, shape)
    out = pooled_shape(shape, kernel, stride, pad)
    top = np.empty(out, np.float32)
    mask = np.empty(out, mask_dtype)
    kernels.max_pool_forward(x, top, mask, *geometry_args(kernel, stride, pad))
    want_top, want_mask = reference.max_pool(x, out[1:], kernel, stride, pad)
    np.testing.assert_array_equal(top, want_top.astype(np.float32))
    np.testing.assert_array_equal(mask, want_mask)

    top_diff = rng.normal(size=out).astype(np.float32)
    bottom_diff = np.full(shape, np.nan, np.float32)  # every element must be written
    kernels.max_pool_backward(top_diff, mask, bottom_diff, *geometry_args(kernel, stride, pad))
    np.testing.assert_allclose(bottom_diff, reference.route(top_diff, want_mask, shape),
                               rtol=1e-6, atol=1e-6)


def test_max_caffe_square_example():
    # test_pooling_layer.cpp TestForwardSquare: 2x2 max pooling of a 3x5 input.
    x = np.array([[1, 2, 5, 2, 3], [9, 4, 1, 4, 8], [1, 2, 5, 2, 3]], np.float32)[None]
    top = np.empty((1, 2, 4), np.float32)
    mask = np.empty((1, 2, 4), np.float32)
    kernels.max_pool_forward(x, top, mask, 2, 2, 1, 1, 0, 0)
    np.testing.assert_array_equal(top[0], [[9, 5, 5, 8], [9, 5, 5, 8]])
    np.testing.assert_array_equal(mask[0], [[5, 2, 2, 9], [5, 12, 12, 9]])
    # Both windows holding the 5 at index 2 route their gradient to it.
    bottom_diff = np.empty_like(x)
    kernels.max_pool_backward(np.ones_like(top), mask, bottom_diff, 2, 2, 1, 1, 0, 0)
    np.testing.assert_array_equal(bottom_diff[0], [[0, 0, 2, 0, 0], [2, 0, 0, 0, 2],
                                                   [0, 0, 2, 0, 0]])


def test_max_ties_keep_the_first_maximum():
    x = np.ones((1, 3, 3), np.float32)
    top = np.empty((1, 1, 1), np.float32)
    mask = np.empty((1, 1, 1), np.int32)
    kernels.max_pool_forward(x, top, mask, 3, 3, 1, 1, 0, 0)
    assert mask[0, 0, 0] == 0


@pytest.mark.parametrize("shape, geometry", CASES)
def test_ave_forward_and_backward(shape, geometry):
    kernel, stride, pad = geometry
    rng = np.random.default_rng(1)
    x = rng.normal(size=shape).astype(np.float32)
    out = pooled_shape(shape, kernel, stride, pad)
    top = np.empty(out, np.float32)
    kernels.ave_pool_forward(x, top, *geometry_args(kernel, stride, pad))
    np.testing.assert_allclose(top, reference.ave_pool(x, out[1:], kernel, stride, pad),
                               rtol=1e-5, atol=1e-6)

    top_diff = rng.normal(size=out).astype(np.float32)
    bottom_diff = np.full(shape, np.nan, np.float32)
    kernels.ave_pool_backward(top_diff, bottom_diff, *geometry_args(kernel, stride, pad))
    np.testing.assert_allclose(
        bottom_diff, reference.ave_pool_backward(top_diff, shape, kernel, stride, pad),
        rtol=1e-5, atol=1e-6)


def test_ave_divides_by_the_window_clipped_to_the_padded_image():
    # test_pooling_layer.cpp TestForwardAve: 3x3 of 2s, kernel 3, stride 1, pad 1.
    x = np.full((1, 3, 3), 2, np.float32)
    top = np.empty((1, 3, 3), np.float32)
    kernels.ave_pool_forward(x, top, 3, 3, 1, 1, 1, 1)
    np.testing.assert_allclose(top[0], [[8 / 9, 4 / 3, 8 / 9], [4 / 3, 2, 4 / 3],
                                        [8 / 9, 4 / 3, 8 / 9]], rtol=1e-6)
    # kernel 3, stride 2, pad 1 on 4 columns: the last window [3, 6) reaches past the padded
    # image [-1, 5), so it divides by 2 (the pixel and one pad), not 3; on 5 columns by 3.
    top = np.empty((1, 1, 3), np.float32)
    kernels.ave_pool_forward(np.arange(4, dtype=np.float32).reshape(1, 1, 4), top, 1, 3, 1, 2,
                             0, 1)
    np.testing.assert_allclose(top[0, 0], [(0 + 1) / 3, (1 + 2 + 3) / 3, 3 / 2], rtol=1e-6)
    kernels.ave_pool_forward(np.arange(5, dtype=np.float32).reshape(1, 1, 5), top, 1, 3, 1, 2,
                             0, 1)
    np.testing.assert_allclose(top[0, 0], [(0 + 1) / 3, (1 + 2 + 3) / 3, (3 + 4) / 3],
                               rtol=1e-6)


STO_CASES = [(s, g) for s, g in CASES if g[2] == (0, 0)]


@pytest.mark.parametrize("shape, geometry", STO_CASES)
def test_stochastic_test_forward_is_the_weighted_average(shape, geometry):
    kernel, stride, _ = geometry
    x = np.random.default_rng(2).uniform(0.1, 1.0, shape).astype(np.float32)
    out = pooled_shape(shape, kernel, stride, (0, 0))
    top = np.empty(out, np.float32)
    window_sum = np.empty(out, np.float32)
    kernels.sto_pool_forward_test(x, top, window_sum, *kernel, *stride)
    np.testing.assert_allclose(top, reference.sto_pool_test(x, out[1:], kernel, stride),
                               rtol=1e-5)


@pytest.mark.parametrize("shape, geometry", STO_CASES)
def test_stochastic_train_samples_inside_the_window_and_routes_back(shape, geometry):
    kernel, stride, _ = geometry
    rng = np.random.default_rng(3)
    x = rng.uniform(0.0, 1.0, shape).astype(np.float32)
    x[rng.random(shape) < 0.3] = 0  # zero activations must never be drawn
    out = pooled_shape(shape, kernel, stride, (0, 0))
    uniform = (1 - rng.random(out)).astype(np.float32)
    top = np.empty(out, np.float32)
    index = np.empty(out, np.int32)
    kernels.sto_pool_forward_train(x, uniform, top, index, *kernel, *stride)
    width = shape[2]
    for p, ph, pw in np.ndindex(*out):
        h, w = divmod(int(index[p, ph, pw]), width)
        window = x[p, ph * stride[0]:ph * stride[0] + kernel[0],
                   pw * stride[1]:pw * stride[1] + kernel[1]]
        if window.sum() == 0:
            continue
        assert ph * stride[0] <= h < ph * stride[0] + kernel[0]
        assert pw * stride[1] <= w < pw * stride[1] + kernel[1]
        assert x[p, h, w] > 0
        assert top[p, ph, pw] == x[p, h, w]
    top_diff = rng.normal(size=out).astype(np.float32)
    bottom_diff = np.full(shape, np.nan, np.float32)
    kernels.sto_pool_backward(top_diff, index, bottom_diff, *kernel, *stride)
    np.testing.assert_allclose(bottom_diff, reference.route(top_diff, index, shape),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("u, expected", [(0.05, 0), (0.1, 0), (0.11, 1), (0.3, 1),
                                         (0.5, 2), (0.6, 2), (0.61, 3), (1.0, 3)])
def test_stochastic_train_threshold(u, expected):
    # Window [1, 2, 3, 4], sum 10: the first position whose running sum reaches 10 u.
    x = np.array([[[1, 2], [3, 4]]], np.float32)
    top = np.empty((1, 1, 1), np.float32)
    index = np.empty((1, 1, 1), np.int32)
    kernels.sto_pool_forward_train(x, np.full((1, 1, 1), u, np.float32), top, index, 2, 2, 1,
                                   1)
    assert index[0, 0, 0] == expected
    assert top[0, 0, 0] == x.ravel()[expected]


def test_stochastic_train_frequencies_follow_the_activations():
    planes = 40000
    x = np.tile(np.array([[0.0, 1.0], [2.0, 5.0]], np.float32), (planes, 1, 1))
    uniform = (1 - np.random.default_rng(4).random((planes, 1, 1))).astype(np.float32)
    top = np.empty((planes, 1, 1), np.float32)
    index = np.empty((planes, 1, 1), np.int32)
    kernels.sto_pool_forward_train(x, uniform, top, index, 2, 2, 1, 1)
    counts = np.bincount(index.ravel(), minlength=4) / planes
    np.testing.assert_allclose(counts, [0, 1 / 8, 2 / 8, 5 / 8], atol=0.01)


def test_stochastic_test_backward_is_the_derivative_of_the_weighted_average():
    rng = np.random.default_rng(5)
    x = rng.uniform(0.1, 1.0, (2, 5, 4)).astype(np.float64)
    kernel, stride, out = (3, 2), (2, 1), (2, 3)
    top_diff = rng.normal(size=(2,) + out)

    def objective(values):
        return float((reference.sto_pool_test(values, out, kernel, stride) * top_diff).sum())

    top = np.empty((2,) + out, np.float32)
    window_sum = np.empty((2,) + out, np.float32)
    x32 = x.astype(np.float32)
    kernels.sto_pool_forward_test(x32, top, window_sum, *kernel, *stride)
    bottom_diff = np.empty_like(x32)
    kernels.sto_pool_backward_test(x32, top, window_sum, top_diff.astype(np.float32),
                                   bottom_diff, *kernel, *stride)
    step = 1e-6
    numeric = np.empty_like(x)
    for i in np.ndindex(*x.shape):
        plus, minus = x.copy(), x.copy()
        plus[i] += step
        minus[i] -= step
        numeric[i] = (objective(plus) - objective(minus)) / (2 * step)
    np.testing.assert_allclose(bottom_diff, numeric, rtol=1e-4, atol=1e-5)
