"""The direct convolution's forward pass (CPU, numba): window sums on the phase planes.

One job per (image, group): Y[j] = sum over (c, tap) of weights[m, c, tap] phases_c[base[tap]
+ j] (phases.py), taps five to a pass (then three, then one), then out = Y's columns (+ bias,
then the inference plan's fused ReLU, if any). Per element the terms come in (c, ki, kj)
order, the padding's as w * 0: the GEMM path's terms in its order, and its "sum, then bias".
"""
import numpy as np
from numba import float32, njit, prange, uintp

from pycaffe_cli.layers.kernels.cpu.depthwise.phases import CHUNK, phase_layout, \
    phase_places, phase_rows
from pycaffe_cli.layers.kernels.cpu.layout import prange_parts, rectify


@njit(cache=True, inline="always")
def _gather_taps(y, start, stop, weights, first, x, x0, base, taps):
    """y[j] += weights[first + t] x[x0 + base[t] + j] for each tap t in turn, j in [start,
    stop); five taps to a pass over y, then three, then one."""
    t = 0
    while t + 5 <= taps:
        w0, w1, w2 = weights[first + t], weights[first + t + 1], weights[first + t + 2]
        w3, w4 = weights[first + t + 3], weights[first + t + 4]
        b0, b1, b2 = x0 + base[t], x0 + base[t + 1], x0 + base[t + 2]
        b3, b4 = x0 + base[t + 3], x0 + base[t + 4]
        for j in range(start, stop):
            v = y[uintp(j)]
            v += w0 * x[uintp(b0 + j)]
            v += w1 * x[uintp(b1 + j)]
            v += w2 * x[uintp(b2 + j)]
            v += w3 * x[uintp(b3 + j)]
            v += w4 * x[uintp(b4 + j)]
            y[uintp(j)] = v
        t += 5
    while t + 3 <= taps:
        w0, w1, w2 = weights[first + t], weights[first + t + 1], weights[first + t + 2]
        b0, b1, b2 = x0 + base[t], x0 + base[t + 1], x0 + base[t + 2]
        for j in range(start, stop):
            v = y[uintp(j)]
            v += w0 * x[uintp(b0 + j)]
            v += w1 * x[uintp(b1 + j)]
            v += w2 * x[uintp(b2 + j)]
            y[uintp(j)] = v
        t += 3
    for t in range(t, taps):
        w0, b0 = weights[first + t], x0 + base[t]
        for j in range(start, stop):
            y[uintp(j)] += w0 * x[uintp(b0 + j)]


@njit(cache=True, inline="always")
def _from_grid(grid, qw, out, dst, out_h, out_w, bias, slope, use_relu):
    """out[dst + oh out_w + ow] = grid[oh qw + ow] + bias (0 where there is none), then
    ReLU with negative slope ``slope`` where ``use_relu`` (the inference plan's fused ReLU:
    layout.rectify, to the bit)."""
    for oh in range(out_h):
        for ow in range(out_w):
            value = grid[uintp(oh * qw + ow)] + bias
            out[uintp(dst + oh * out_w + ow)] = rectify(value, slope) if use_relu else value


@njit(cache=True, parallel=True, nogil=True)
def _forward_kernel(im, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                    stride_h, stride_w, dilation_h, dilation_w, weights, out_channels, group,
                    bias, use_bias, slope, use_relu, out, parts):
    out_h, out_w, qh, qw, size, base = phase_layout(height, width, kernel_h, kernel_w, pad_h,
                                                    pad_w, stride_h, stride_w, dilation_h,
                                                    dilation_w)
    places = phase_places(height, width, pad_h, pad_w, stride_h, stride_w, qh, qw)
    per_in, per_out = channels // group, out_channels // group
    block, taps = stride_h * stride_w * qh * qw, kernel_h * kernel_w
    for part in prange(parts):
        phases = np.zeros(per_in * block, np.float32)  # the padding stays 0
        y = np.empty(size, np.float32)
        for job in range(part * num * group // parts, (part + 1) * num * group // parts):
            n, g = job // group, job % group
            for c in range(per_in):
                phase_rows(phases, c * block, im, (n * channels + g * per_in + c) * height
                           * width, width, stride_w, places, True)
            for m in range(g * per_out, (g + 1) * per_out):
                for start in range(0, size, CHUNK):
                    stop = min(start + CHUNK, size)
                    y[start:stop] = 0
                    for c in range(per_in):
                        _gather_taps(y, start, stop, weights, (m * per_in + c) * taps, phases,
                                     c * block, base, taps)
                _from_grid(y, qw, out, (n * out_channels + m) * out_h * out_w, out_h, out_w,
                           bias[m] if use_bias else float32(0.0), slope, use_relu)


def forward(im, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h,
            stride_w, dilation_h, dilation_w, weights, out_channels, group, bias, out,
            relu_slope=None):
    """out = the grouped convolution of ``num`` images ``im`` (+ ``bias``, or None), then
    ReLU with negative slope ``relu_slope`` (None: none); see the package doc. ``out`` is
    overwritten."""
    _forward_kernel(im, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                    stride_h, stride_w, dilation_h, dilation_w, weights, out_channels, group,
                    weights if bias is None else bias, bias is not None,
                    np.float32(relu_slope or 0), relu_slope is not None, out,
                    prange_parts(num * group))
