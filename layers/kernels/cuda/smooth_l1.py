"""Smooth L1 loss on the GPU (numba.cuda): kernels/cpu/smooth_l1.py's per-element bodies
(formulas there) in grid-stride loops, plus the per-instance channel sums of R-FCN's second
top. Arrays are flat device arrays; scalars float32."""
import numpy as np
from numba import cuda

from pycaffe_cli.cuda.device import device_function
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.kernels.cpu.smooth_l1 import (smooth_l1_backward_at_py,
                                                      smooth_l1_forward_at_py)

_forward_at = device_function(smooth_l1_forward_at_py)
_backward_at = device_function(smooth_l1_backward_at_py)


@cuda.jit(cache=True)
def _smooth_l1_forward_kernel(n, pred, target, inside, outside, has_inside, has_outside,
                              sigma2, diff, errors):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        _forward_at(pred, target, inside, outside, has_inside, has_outside, sigma2, diff,
                    errors, index)


@cuda.jit(cache=True)
def _smooth_l1_backward_kernel(n, diff, inside, outside, weighted, sigma2, alpha, out):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        _backward_at(diff, inside, outside, weighted, sigma2, alpha, out, index)


@cuda.jit(cache=True)
def _channel_sum_kernel(n, errors, channels, inner, out):
    """out[o, j] = sum over c of errors[o, c, j] (float32, channels in order)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        start = (index // inner) * channels * inner + index % inner
        total = np.float32(0.0)
        for c in range(channels):
            total += errors[start + c * inner]
        out[index] = total


def smooth_l1_forward(pred, target, inside, outside, has_inside, has_outside, sigma2, diff,
                      errors):
    """diff = w_in (pred - target), errors = w_out f(diff) over the flat arrays."""
    launch(_smooth_l1_forward_kernel, pred.size, pred, target, inside, outside,
           bool(has_inside), bool(has_outside), np.float32(sigma2), diff, errors)


def smooth_l1_backward(diff, inside, outside, weighted, sigma2, alpha, out):
    """out = alpha f'(diff) (times w_in w_out when ``weighted``)."""
    launch(_smooth_l1_backward_kernel, diff.size, diff, inside, outside, bool(weighted),
           np.float32(sigma2), np.float32(alpha), out)


def channel_sums(errors, outer, channels, inner, out):
    """out (outer * inner) = errors (outer, channels, inner) summed over channels."""
    launch(_channel_sum_kernel, outer * inner, errors, channels, inner, out)
