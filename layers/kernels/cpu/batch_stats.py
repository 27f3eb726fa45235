"""BatchNorm with the batch's statistics (CPU, numba): forward and backward, each channel in
one job, over arrays viewed as (num, channels, inner).

A job reads its channel for the sums, then again for the values it writes; the second read
mostly comes from the cache the first filled (one channel of a ResNet stage at batch 8 is
100-400 KB), where numpy's formulas stream the whole blob through memory eight to ten times,
with a fresh temporary each time.

The arithmetic is numpy's, in its order, so the bits are those of:

    mean = x.sum(axis=2).sum(axis=0, dtype=float64) / m       (m = num * inner), as float32
    var  = np.square(x - mean).sum(axis=2).sum(axis=0, dtype=float64) / m, as float32
    y    = (x - mean) / std                                     (std = sqrt(var + eps))
    dx   = (dy - mean(dy) - mean(dy * y) * y) * (1 / std)

each row of ``inner`` values summed in numpy's pairwise order, the rows of a channel one
after another in float64 (``layout.channel_sum``); fewer than channel_affine's PARALLEL_MIN
values run on one thread. Arrays are flat (1-d) C-contiguous; ``y`` may be ``x`` and ``dx``
may be ``dy`` (in place).
"""
import numpy as np
from numba import float32, njit, prange, uintp

from pycaffe_cli.layers.kernels.cpu.channel_affine import PARALLEL_MIN
from pycaffe_cli.layers.kernels.cpu.layout import channel_sum


@njit(cache=True, inline="always")
def _channel_mean(a, b, num, channels, inner, c, shift):
    """``layout.channel_sum`` over the channel's num * inner values, as float32."""
    return float32(channel_sum(a, b, num, channels, inner, c, shift) / (num * inner))


@njit(cache=True, inline="always")
def _forward_channel(x, num, channels, inner, eps, c, y, x_norm, mean, var, std):
    mu = _channel_mean(x, None, num, channels, inner, c, float32(0.0))
    sigma2 = _channel_mean(x, x, num, channels, inner, c, mu)
    sigma = np.sqrt(sigma2 + eps)
    mean[c], var[c], std[c] = mu, sigma2, sigma
    for n in range(num):
        start = (n * channels + c) * inner
        for i in range(start, start + inner):
            value = (x[uintp(i)] - mu) / sigma
            x_norm[uintp(i)] = value
            y[uintp(i)] = value


@njit(cache=True, parallel=True, nogil=True)
def _forward(x, num, channels, inner, eps, y, x_norm, mean, var, std):
    if x.size < PARALLEL_MIN:
        for c in range(channels):
            _forward_channel(x, num, channels, inner, eps, c, y, x_norm, mean, var, std)
        return
    for c in prange(channels):
        _forward_channel(x, num, channels, inner, eps, c, y, x_norm, mean, var, std)


def forward(x, num, channels, inner, eps, y, x_norm, mean, var, std):
    """y = x_norm = (x - mean[c]) / std[c] with the batch's statistics; fills ``mean``,
    ``var`` (biased) and ``std`` (sqrt(var + eps)), float32 arrays of ``channels``."""
    _forward(x, num, channels, inner, np.float32(eps), y, x_norm, mean, var, std)


@njit(cache=True, inline="always")
def _backward_channel(dy, x_norm, std, num, channels, inner, c, dx):
    mean_dy = _channel_mean(dy, None, num, channels, inner, c, float32(0.0))
    mean_dy_y = _channel_mean(dy, x_norm, num, channels, inner, c, float32(0.0))
    inv_std = float32(1.0) / std[c]
    for n in range(num):
        start = (n * channels + c) * inner
        for i in range(start, start + inner):
            at = uintp(i)
            dx[at] = (dy[at] - mean_dy - mean_dy_y * x_norm[at]) * inv_std


@njit(cache=True, parallel=True, nogil=True)
def _backward(dy, x_norm, std, num, channels, inner, dx):
    if dy.size < PARALLEL_MIN:
        for c in range(channels):
            _backward_channel(dy, x_norm, std, num, channels, inner, c, dx)
        return
    for c in prange(channels):
        _backward_channel(dy, x_norm, std, num, channels, inner, c, dx)


def backward(dy, x_norm, std, num, channels, inner, dx):
    """dx = (dy - mean(dy) - mean(dy * x_norm) x_norm) / std per channel: the gradient
    through the batch's statistics."""
    _backward(dy, x_norm, std, num, channels, inner, dx)
