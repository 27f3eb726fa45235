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

WITHIN_CHANNEL is not here: it is AVE pooling (``cuda/pooling.py``) plus elementwise maths.
"""
import numpy as np
from numba import cuda

from pycaffe_cli.layers.kernels.cuda.device import device_function
from pycaffe_cli.layers.kernels.cuda.launch import launch


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


@cuda.jit
def _lrn_across_forward_kernel(n, bottom, scale, top, size, alpha_over_size, k, beta):
    pixels = bottom.shape[2]
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        _lrn_across_forward_at(bottom, scale, top, size, alpha_over_size, k, beta,
                               index // pixels, index % pixels)


@cuda.jit
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
