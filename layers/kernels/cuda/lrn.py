"""ACROSS_CHANNELS local response normalisation on the GPU (numba.cuda).

The CPU kernels' names, signatures and maths (``kernels/cpu/lrn.py``): arrays are device
arrays viewed as (N, C, H*W), scalars float32, a = alpha / size, pre_pad = (size - 1) / 2:

    scale_c = k + a * sum_{c' in window(c)} x_c'^2,        y_c = x_c * scale_c^-beta
    dx_c = dy_c * scale_c^-beta
           - (2 alpha beta / size) * x_c * sum_{c' in window(c)} dy_c' * y_c' / scale_c'

One thread per (n, pixel) walks the channels with a running window sum, as Caffe's
LRNFillScale and LRNComputeDiff (lrn_layer.cu) do; the forward writes ``top`` in the same
walk (Caffe's separate LRNComputeOutput pass). Every thread writes only its own pixel's
column, so the backward pass is a gather with no atomics. The running sums add and drop
channels in the CPU kernels' order, so scale, top and bottom_diff take the CPU's float32
roundings, up to the power function and any multiply-adds the device compiler fuses.

WITHIN_CHANNEL is AVE pooling of x^2 over a size x size window (``cuda/pooling.py``) plus
element-wise kernels, in the CPU functions' float32 order (flat arrays, P = planes)::

    pooled = avepool(x^2),  power = (1 + alpha pooled)^-beta,  y = x power
    dx = power dy + 2 x avepool_backward(-beta alpha x dy power / (1 + alpha pooled))
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.layers.kernels.cuda import pooling

from pycaffe_cli.cuda.device import device_function
from pycaffe_cli.cuda.launch import launch


def lrn_across_forward_at_py(bottom, scale, top, size, alpha_over_size, k, beta, n, i):
    """scale and top for every channel of image ``n`` at pixel ``i``."""
    channels = bottom.shape[1]
    pre_pad = (size - 1) // 2
    value = k
    for c in range(min(size - pre_pad, channels)):
        value += alpha_over_size * (bottom[n, c, i] * bottom[n, c, i])
    for c in range(channels):
        if c > 0:
            head = c + pre_pad
            tail = c - 1 - pre_pad
            if head < channels:
                value += alpha_over_size * (bottom[n, head, i] * bottom[n, head, i])
            if tail >= 0:
                value += -alpha_over_size * (bottom[n, tail, i] * bottom[n, tail, i])
        scale[n, c, i] = value
        top[n, c, i] = bottom[n, c, i] * value ** -beta


def lrn_across_backward_at_py(bottom, top, scale, top_diff, bottom_diff, size, beta,
                              cache_ratio, n, i):
    """bottom_diff for every channel of image ``n`` at pixel ``i``."""
    channels = bottom.shape[1]
    pre_pad = (size - 1) // 2
    accum = np.float32(0.0)
    # channels -pre_pad .. pre_pad - 1: the window of channel 0 but its last member
    for c in range(min(pre_pad, channels)):
        accum += top_diff[n, c, i] * top[n, c, i] / scale[n, c, i]
    for c in range(channels):
        head = c + pre_pad
        tail = c - pre_pad
        if head < channels:
            accum += top_diff[n, head, i] * top[n, head, i] / scale[n, head, i]
        grad = top_diff[n, c, i] * scale[n, c, i] ** -beta
        grad += -cache_ratio * (bottom[n, c, i] * accum)
        bottom_diff[n, c, i] = grad
        if tail >= 0:
            accum -= top_diff[n, tail, i] * top[n, tail, i] / scale[n, tail, i]


_lrn_across_forward_at = device_function(lrn_across_forward_at_py)
_lrn_across_backward_at = device_function(lrn_across_backward_at_py)


@cuda.jit(cache=True)
def _lrn_across_forward_kernel(n, bottom, scale, top, size, alpha_over_size, k, beta):
    pixels = bottom.shape[2]
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        _lrn_across_forward_at(bottom, scale, top, size, alpha_over_size, k, beta,
                               index // pixels, index % pixels)


@cuda.jit(cache=True)
def _lrn_across_backward_kernel(n, bottom, top, scale, top_diff, bottom_diff, size, beta,
                                cache_ratio):
    pixels = bottom.shape[2]
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        _lrn_across_backward_at(bottom, top, scale, top_diff, bottom_diff, size, beta,
                                cache_ratio, index // pixels, index % pixels)


def _columns(array):
    """Threads for an (N, C, P) array: one per (n, pixel), none when there are no channels."""
    num, channels, pixels = array.shape
    return num * pixels if channels else 0


def lrn_across_forward(bottom, scale, top, size, alpha_over_size, k, beta):
    """Fill ``scale`` and ``top`` (N, C, P) from ``bottom``; scalars are taken as float32."""
    launch(_lrn_across_forward_kernel, _columns(bottom), bottom, scale, top, size,
           np.float32(alpha_over_size), np.float32(k), np.float32(beta))


def lrn_across_backward(bottom, top, scale, top_diff, bottom_diff, size, beta, cache_ratio):
    """Write ``bottom_diff`` (N, C, P); ``cache_ratio`` = 2 alpha beta / size (float32)."""
    launch(_lrn_across_backward_kernel, _columns(bottom), bottom, top, scale, top_diff,
           bottom_diff, size, np.float32(beta), np.float32(cache_ratio))


# --- WITHIN_CHANNEL ---------------------------------------------------------------------------
@cuda.jit(cache=True)
def _square_kernel(n, x, out):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        out[index] = x[index] * x[index]


@cuda.jit(cache=True)
def _within_output_kernel(n, x, pooled, alpha, beta, power, top):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        value = math.pow(pooled[index] * alpha + np.float32(1), -beta)
        power[index] = value
        top[index] = x[index] * value


@cuda.jit(cache=True)
def _within_pooled_grad_kernel(n, x, pooled, power, top_diff, alpha, minus_beta_alpha, out):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        ratio = power[index] / (pooled[index] * alpha + np.float32(1)) * minus_beta_alpha
        out[index] = (x[index] * top_diff[index]) * ratio


@cuda.jit(cache=True)
def _within_bottom_grad_kernel(n, x, power, top_diff, square_grad, bottom_diff):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        bottom_diff[index] = (power[index] * top_diff[index]
                              + square_grad[index] * (x[index] * np.float32(2)))


def _window(size):
    pad = (size - 1) // 2
    return size, size, 1, 1, pad, pad


def lrn_within_forward(bottom, top, pooled, power, scratch, size, alpha, beta):
    """WITHIN_CHANNEL forward on (P, H, W) device planes; keeps ``pooled`` and ``power`` for
    the backward pass (``scratch``: a (P, H, W) work array)."""
    n = bottom.size
    launch(_square_kernel, n, bottom.reshape(n), scratch.reshape(n))
    pooling.ave_pool_forward(scratch, pooled, *_window(size))
    launch(_within_output_kernel, n, bottom.reshape(n), pooled.reshape(n), np.float32(alpha),
           np.float32(beta), power.reshape(n), top.reshape(n))


def lrn_within_backward(bottom, pooled, power, top_diff, bottom_diff, scratch, size, alpha,
                        beta):
    """WITHIN_CHANNEL backward on (P, H, W) device planes: writes ``bottom_diff``; ``scratch``
    (P, H, W) takes the pooled gradient, and ``bottom_diff`` the squares' gradient first."""
    n = bottom.size
    minus_beta_alpha = np.float32(-np.float32(beta) * np.float32(alpha))
    launch(_within_pooled_grad_kernel, n, bottom.reshape(n), pooled.reshape(n),
           power.reshape(n), top_diff.reshape(n), np.float32(alpha), minus_beta_alpha,
           scratch.reshape(n))
    pooling.ave_pool_backward(scratch, bottom_diff, *_window(size))
    flat_diff = bottom_diff.reshape(n)
    launch(_within_bottom_grad_kernel, n, bottom.reshape(n), power.reshape(n),
           top_diff.reshape(n), flat_diff, flat_diff)
