"""LRN kernels against explicit-window numpy references (float64)."""
import numpy as np
import pytest

from pycaffe_cli.layers.kernels.cpu import lrn as kernels
from tests.kernels import reference

f32 = np.float32

# (shape, local_size, alpha, beta, k); 20x30 = 600 pixels spans two pixel blocks.
ACROSS = [((2, 7, 3, 3), 5, 1.0, 0.75, 1.0), ((2, 7, 3, 3), 15, 1.0, 0.75, 1.0),
          ((1, 4, 2, 5), 3, 0.5, 0.6, 2.0), ((2, 6, 20, 30), 5, 1e-2, 0.75, 1.0),
          ((1, 3, 4, 4), 1, 2.0, 1.0, 0.5), ((3, 1, 2, 2), 5, 1.0, 0.75, 1.0)]
WITHIN = [((2, 7, 3, 3), 3, 1.0, 0.75), ((1, 2, 6, 5), 5, 0.5, 0.6), ((2, 2, 4, 7), 1, 2.0, 1.0)]


def across(x, size, alpha, beta, k):
    flat = x.reshape(x.shape[0], x.shape[1], -1)
    scale = np.empty_like(flat)
    top = np.empty_like(flat)
    kernels.lrn_across_forward(flat, scale, top, size, f32(f32(alpha) / f32(size)), f32(k),
                               f32(beta))
    return top.reshape(x.shape), scale.reshape(x.shape)


@pytest.mark.parametrize("shape, size, alpha, beta, k", ACROSS)
def test_across_forward(shape, size, alpha, beta, k):
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    top, scale = across(x, size, alpha, beta, k)
    want_top, want_scale = reference.lrn_across(x, size, alpha, beta, k)
    np.testing.assert_allclose(scale, want_scale, rtol=1e-5)
    np.testing.assert_allclose(top, want_top, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape, size, alpha, beta, k", ACROSS)
def test_across_backward(shape, size, alpha, beta, k):
    rng = np.random.default_rng(1)
    x = rng.normal(size=shape).astype(np.float32)
    top_diff = rng.normal(size=shape).astype(np.float32)
    top, scale = across(x, size, alpha, beta, k)
    bottom_diff = np.full(shape, np.nan, np.float32)
    view = lambda a: a.reshape(shape[0], shape[1], -1)  # noqa: E731
    kernels.lrn_across_backward(view(x), view(top), view(scale), view(top_diff),
                                view(bottom_diff), size, f32(beta),
                                f32(2.0 * alpha * beta / size))
    want = reference.lrn_across_backward(x, top_diff, size, alpha, beta, k)
    np.testing.assert_allclose(bottom_diff, want, rtol=1e-4, atol=1e-5)


def within(x, size, alpha, beta):
    planes = x.reshape(-1, *x.shape[2:])
    top, pooled, power = (np.empty_like(planes) for _ in range(3))
    kernels.lrn_within_forward(planes, top, pooled, power, size, f32(alpha), f32(beta))
    return top.reshape(x.shape), pooled, power


@pytest.mark.parametrize("shape, size, alpha, beta", WITHIN)
def test_within_forward(shape, size, alpha, beta):
    x = np.random.default_rng(2).normal(size=shape).astype(np.float32)
    top, _, _ = within(x, size, alpha, beta)
    np.testing.assert_allclose(top, reference.lrn_within(x, size, alpha, beta), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("shape, size, alpha, beta", WITHIN)
def test_within_backward_matches_finite_differences(shape, size, alpha, beta):
    rng = np.random.default_rng(3)
    x = rng.normal(size=shape)
    top_diff = rng.normal(size=shape)
    _, pooled, power = within(x.astype(np.float32), size, alpha, beta)
    bottom_diff = np.full(pooled.shape, np.nan, np.float32)
    kernels.lrn_within_backward(x.reshape(pooled.shape).astype(np.float32), pooled, power,
                                top_diff.reshape(pooled.shape).astype(np.float32), bottom_diff,
                                size, f32(alpha), f32(beta))
    step = 1e-6
    numeric = np.empty_like(x)
    for i in np.ndindex(*shape):
        plus, minus = x.copy(), x.copy()
        plus[i] += step
        minus[i] -= step
        numeric[i] = ((reference.lrn_within(plus, size, alpha, beta)
                       - reference.lrn_within(minus, size, alpha, beta)) * top_diff).sum() / (
                           2 * step)
    np.testing.assert_allclose(bottom_diff.reshape(shape), numeric, rtol=1e-4, atol=1e-5)
