"""L2 normalisation kernels of SSD's Normalize layer on the GPU (numba.cuda); the maths of
kernels/cpu/normalize.py, over flat arrays viewed (N, C, S).

Every reduction gathers, one thread per output, with no atomics: the per-position sums
(``across_spatial`` false) take one thread per (n, s) looping over the channels; the
per-sample sums and the scale gradient first take one thread per (n, c) looping over the
positions (``channel_partials``, float64 partials), then one thread per sample or channel
adding those up. Sums run in float64 and are rounded once to float32, so results differ from
the CPU's only in the order of the additions.
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.cuda.launch import launch

PRODUCT = 0       # partial sums of a * b
OVER_NORM = 1     # partial sums of a * b / norm


@cuda.jit(cache=True)
def _position_sums_kernel(n, channels, inner, a, b, eps, root, out):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        sample = index // inner
        s = index % inner
        base = sample * channels * inner + s
        total = 0.0
        for c in range(channels):
            total += np.float64(a[base + c * inner]) * np.float64(b[base + c * inner])
        if root:
            total = math.sqrt(total + eps)
        out[index] = np.float32(total)


@cuda.jit(cache=True)
def _channel_partials_kernel(n, channels, inner, a, b, norm, per_position, mode, partials):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        sample = index // channels
        base = index * inner
        total = 0.0
        for s in range(inner):
            term = b[base + s]
            if mode == OVER_NORM:
                term = term / (norm[sample * inner + s] if per_position else norm[sample])
            total += np.float64(a[base + s]) * np.float64(term)
        partials[index] = total


@cuda.jit(cache=True)
def _sample_sums_kernel(n, channels, partials, eps, root, out):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        total = 0.0
        for c in range(channels):
            total += partials[index * channels + c]
        if root:
            total = math.sqrt(total + eps)
        out[index] = np.float32(total)


@cuda.jit(cache=True)
def _scale_diff_kernel(n, num, channels, partials, diff):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        total = 0.0
        if n == 1:
            for k in range(num * channels):
                total += partials[k]
        else:
            for sample in range(num):
                total += partials[sample * channels + index]
        diff[index] += np.float32(total)


@cuda.jit(cache=True)
def _forward_kernel(n, channels, inner, x, norm, per_position, scale, shared, y):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        sample = index // (channels * inner)
        c = (index // inner) % channels
        divisor = norm[sample * inner + index % inner] if per_position else norm[sample]
        y[index] = x[index] / divisor * (scale[0] if shared else scale[c])


@cuda.jit(cache=True)
def _backward_kernel(n, channels, inner, x, dy, norm, dots, per_position, scale, shared, dx):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        sample = index // (channels * inner)
        c = (index // inner) % channels
        k = sample * inner + index % inner if per_position else sample
        value = norm[k]
        dx[index] = ((dy[index] - x[index] * (dots[k] / value / value)) / value
                     * (scale[0] if shared else scale[c]))


@cuda.jit(cache=True)
def _scale_channels_kernel(n, channels, inner, a, scale, out):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        c = (index // inner) % channels
        out[index] = a[index] * scale[c if scale.size > 1 else 0]


def scale_channels(a, scale, channels, inner, out):
    """out = scale_c * a (one scale, or one per channel)."""
    launch(_scale_channels_kernel, a.size, channels, inner, a, scale, out)


def norms(x, num, channels, inner, eps, per_position, partials, norm):
    """norm (N,) or (N*S,) = sqrt(eps + sum x^2); ``partials`` a float64 scratch of N*C."""
    _sums(x, x, num, channels, inner, np.float64(eps), True, per_position, partials, norm)


def sums_of_products(a, b, num, channels, inner, per_position, partials, out):
    """out (N,) or (N*S,) = sum a * b over the sample or over the channels."""
    _sums(a, b, num, channels, inner, np.float64(0), False, per_position, partials, out)


def _sums(a, b, num, channels, inner, eps, root, per_position, partials, out):
    if per_position:
        launch(_position_sums_kernel, num * inner, channels, inner, a, b, eps, root, out)
        return
    launch(_channel_partials_kernel, num * channels, channels, inner, a, b, a, False,
           PRODUCT, partials)
    launch(_sample_sums_kernel, num, channels, partials, eps, root, out)


def normalize_forward(x, norm, scale, channels, inner, per_position, y):
    """y = scale_c * x / norm."""
    launch(_forward_kernel, x.size, channels, inner, x, norm, per_position, scale,
           scale.size == 1, y)


def normalize_backward(x, dy, norm, dots, scale, channels, inner, per_position, dx):
    """dx = scale_c * (dy - x * dot / norm^2) / norm."""
    launch(_backward_kernel, x.size, channels, inner, x, dy, norm, dots, per_position, scale,
           scale.size == 1, dx)


def accumulate_scale_gradient(x, dy, norm, num, channels, inner, per_position, partials,
                              diff):
    """diff (C,) or (1,) += sum over n, s (and c for one value) of dy * x / norm."""
    launch(_channel_partials_kernel, num * channels, channels, inner, dy, x, norm,
           per_position, OVER_NORM, partials)
    launch(_scale_diff_kernel, diff.size, num, channels, partials, diff)
