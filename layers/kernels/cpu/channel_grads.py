"""Scale's backward pass (CPU, numba), each channel in one job, over arrays viewed as (outer,
channels, inner): the scale's gradient sum(dy * x), the bias's sum(dy) and the bottom's
gradient dy * scale[c], whichever are asked for.

A job reads its channel for the sums, then again (mostly from the cache) to write dx, so
``dx`` may be ``dy`` (in place). Each row of ``inner`` values is summed in numpy's pairwise
order, the rows of a channel one after another in float64 (``layout.channel_sum``): the
bias's sum is the bits of ``dy.sum(axis=2).sum(axis=0, dtype=float64)``. Arrays are flat
(1-d) C-contiguous.
"""
import numpy as np
from numba import float32, njit, prange, uintp

from pycaffe_cli.layers.kernels.cpu.channel_affine import PARALLEL_MIN
from pycaffe_cli.layers.kernels.cpu.layout import channel_sum

# Stand in for a gradient not asked for.
NO_SUMS = np.zeros(0, np.float64)
NO_VALUES = np.zeros(0, np.float32)


@njit(cache=True, inline="always")
def _channel(dy, x, scale, outer, channels, inner, c, scale_grad, bias_grad, dx):
    if scale_grad.size:
        scale_grad[c] = channel_sum(dy, x, outer, channels, inner, c, float32(0.0))
    if bias_grad.size:
        bias_grad[c] = channel_sum(dy, None, outer, channels, inner, c, float32(0.0))
    if dx.size:
        s = scale[c]
        for n in range(outer):
            start = (n * channels + c) * inner
            for i in range(start, start + inner):
                dx[uintp(i)] = dy[uintp(i)] * s


@njit(cache=True, parallel=True, nogil=True)
def _backward(dy, x, scale, outer, channels, inner, scale_grad, bias_grad, dx):
    if dy.size < PARALLEL_MIN:
        for c in range(channels):
            _channel(dy, x, scale, outer, channels, inner, c, scale_grad, bias_grad, dx)
        return
    for c in prange(channels):
        _channel(dy, x, scale, outer, channels, inner, c, scale_grad, bias_grad, dx)


def scale_backward(dy, x, scale, outer, channels, inner, scale_grad, bias_grad, dx):
    """Fills ``scale_grad[c]`` = sum(dy * x) and ``bias_grad[c]`` = sum(dy) (float64 arrays
    of ``channels``) and writes dx = dy * scale[c]; an empty array (``NO_SUMS``,
    ``NO_VALUES``) in place of ``scale_grad``, ``bias_grad`` or ``dx`` skips that one."""
    _backward(dy, x, scale, outer, channels, inner, scale_grad, bias_grad, dx)
