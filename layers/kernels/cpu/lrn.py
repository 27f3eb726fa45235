"""Local response normalisation kernels (Caffe's LRNLayer maths), float32 throughout.

ACROSS_CHANNELS, over arrays viewed as (N, C, H*W), with a = alpha / size and the window of
channels [c - pre_pad, c + pre_pad], pre_pad = (size - 1) / 2 (channels outside are zeros):

    scale_c = k + a * sum_{c' in window(c)} x_c'^2,        y_c = x_c * scale_c^-beta
    dx_c = dy_c * scale_c^-beta
           - (2 alpha beta / size) * x_c * sum_{c' in window(c)} dy_c' * y_c' / scale_c'

Both passes keep a running window sum over channels (add the channel entering, subtract the
one leaving), as Caffe's CrossChannelForward/Backward_cpu do, with a ``prange`` over
(image, block of pixels) pairs. Indices are cast to ``uintp`` (numba's wraparound handling
of signed ones kept the loops from vectorising, the backward's the more with the ratio a
call of its own: docs/kernel-choices.md, "Unsigned indices").

WITHIN_CHANNEL (Caffe composes Split, Power, AVE Pooling, Power and Eltwise PROD layers; the
same maths here, in the same order), with a local_size x local_size window padded by pre_pad:

    s = avepool(x^2),  p = (1 + alpha * s)^-beta,  y = x * p
    dx = dy * p + 2 x * avepool_backward(dy * x * (-beta alpha) * p / (1 + alpha s))
"""
import numpy as np
from numba import njit, prange, uintp

from pycaffe_cli.layers.kernels.cpu.pooling import ave_pool_backward, ave_pool_forward

PIXEL_BLOCK = 512  # pixels per parallel job: enough work per job, fits in L1 per channel


@njit(cache=True, inline="always")
def _power(scale, beta, three_quarters):
    """``scale ** -beta`` in float32. For beta = 0.75 (AlexNet's, GoogLeNet's: nearly every
    LRN) as 1 / sqrt(s sqrt(s)) in float64, rounded once: the float32 power correctly
    rounded, as powf gives it (bit for bit on 6M GoogLeNet activations), but sqrt vectorises
    and powf does not (docs/kernel-choices.md, "LRN's power")."""
    if three_quarters:
        wide = np.float64(scale)
        return np.float32(1.0 / np.sqrt(wide * np.sqrt(wide)))
    return scale ** -beta


@njit(cache=True, inline="always")
def _square(x, n, c, i):
    return x[n, uintp(c), i] * x[n, uintp(c), i]


@njit(cache=True, parallel=True)
def lrn_across_forward(bottom, scale, top, size, alpha_over_size, k, beta):
    """Fill ``scale`` and ``top`` (N, C, P) from ``bottom``; scalars are float32."""
    num, channels, pixels = bottom.shape
    three_quarters = beta == np.float32(0.75)
    pre_pad = (size - 1) // 2
    blocks = (pixels + PIXEL_BLOCK - 1) // PIXEL_BLOCK
    for job in prange(num * blocks):
        n = uintp(job // blocks)
        i0 = (job % blocks) * PIXEL_BLOCK
        i1 = min(i0 + PIXEL_BLOCK, pixels)
        first = uintp(0)
        for i in range(i0, i1):
            scale[n, first, uintp(i)] = k
        for c in range(min(size - pre_pad, channels)):
            for i in range(i0, i1):
                scale[n, first, uintp(i)] += alpha_over_size * _square(bottom, n, c, uintp(i))
        for c in range(1, channels):
            head = c + pre_pad
            tail = c - 1 - pre_pad
            for i in range(i0, i1):
                at = uintp(i)
                value = scale[n, uintp(c - 1), at]
                if head < channels:
                    value += alpha_over_size * _square(bottom, n, head, at)
                if tail >= 0:
                    value += -alpha_over_size * _square(bottom, n, tail, at)
                scale[n, uintp(c), at] = value
        for c in range(channels):
            for i in range(i0, i1):
                at = uintp(i)
                top[n, uintp(c), at] = bottom[n, uintp(c), at] * _power(
                    scale[n, uintp(c), at], beta, three_quarters)


@njit(cache=True, inline="always")
def _ratio(top_diff, top, scale, n, c, i):
    c = uintp(c)
    return top_diff[n, c, i] * top[n, c, i] / scale[n, c, i]


@njit(cache=True, parallel=True)
def lrn_across_backward(bottom, top, scale, top_diff, bottom_diff, size, beta, cache_ratio):
    """Write ``bottom_diff`` (N, C, P); ``cache_ratio`` = 2 alpha beta / size (float32)."""
    num, channels, pixels = bottom.shape
    three_quarters = beta == np.float32(0.75)
    pre_pad = (size - 1) // 2
    blocks = (pixels + PIXEL_BLOCK - 1) // PIXEL_BLOCK
    for job in prange(num * blocks):
        n = uintp(job // blocks)
        i0 = (job % blocks) * PIXEL_BLOCK
        i1 = min(i0 + PIXEL_BLOCK, pixels)
        accum = np.zeros(i1 - i0, np.float32)
        # channels -pre_pad .. pre_pad - 1: the window of channel 0 but its last member
        for c in range(min(pre_pad, channels)):
            for i in range(i0, i1):
                accum[uintp(i - i0)] += _ratio(top_diff, top, scale, n, c, uintp(i))
        for c in range(channels):
            head = c + pre_pad
            tail = c - pre_pad
            for i in range(i0, i1):
                at, j = uintp(i), uintp(i - i0)
                if head < channels:
                    accum[j] += _ratio(top_diff, top, scale, n, head, at)
                grad = top_diff[n, uintp(c), at] * _power(scale[n, uintp(c), at], beta,
                                                          three_quarters)
                grad += -cache_ratio * (bottom[n, uintp(c), at] * accum[j])
                bottom_diff[n, uintp(c), at] = grad
                if tail >= 0:
                    accum[j] -= _ratio(top_diff, top, scale, n, tail, at)


def _square_window(size):
    pad = (size - 1) // 2
    return size, size, 1, 1, pad, pad


def lrn_within_forward(bottom, top, pooled, power, size, alpha, beta):
    """WITHIN_CHANNEL forward on (P, H, W) planes; keeps ``pooled`` (avepool of x^2) and
    ``power`` ((1 + alpha pooled)^-beta) for the backward pass. Scalars are float32."""
    ave_pool_forward(np.square(bottom), pooled, *_square_window(size))
    np.multiply(pooled, alpha, out=power)
    np.add(power, np.float32(1.0), out=power)
    np.power(power, -beta, out=power)
    np.multiply(bottom, power, out=top)


def lrn_within_backward(bottom, pooled, power, top_diff, bottom_diff, size, alpha, beta):
    """WITHIN_CHANNEL backward on (P, H, W) planes: writes ``bottom_diff``."""
    # d power (Eltwise PROD), then through the Power layer: diff_scale * p / (1 + alpha s)
    base = np.multiply(pooled, alpha)
    np.add(base, np.float32(1.0), out=base)
    d_pooled = np.divide(power, base)
    np.multiply(d_pooled, np.float32(-beta * alpha), out=d_pooled)
    np.multiply(np.multiply(bottom, top_diff), d_pooled, out=d_pooled)
    d_square = np.empty_like(bottom)
    ave_pool_backward(d_pooled, d_square, *_square_window(size))
    np.multiply(d_square, np.multiply(bottom, np.float32(2.0)), out=d_square)
    np.multiply(power, top_diff, out=bottom_diff)
    np.add(bottom_diff, d_square, out=bottom_diff)
