"""The direct convolution's forward pass (CPU, numba): window sums on the phase planes.

One job per (image, group): Y[j] = sum over (c, tap) of weights[m, c, tap] phases_c[base[tap]
+ j] (phases.py), taps five to a pass (then three, then one), then out = Y's columns (+ bias,
then the inference plan's fused ReLU, if any). Per element the terms come in (c, ki, kj)
order, the padding's as w * 0: the GEMM path's terms in its order, and its "sum, then bias".

Depthwise 3x3 layers (one channel a group, nine taps: MobileNet's) sum all nine taps in one
pass, in the same order, so Y is written once instead of read and written three times; where
output rows are wide (``ROWS_MIN_WIDTH``) the pass runs row by row straight into ``out``,
bias and ReLU included, with no grid to copy out of (docs/kernel-choices.md, "Direct
convolution").
"""
import numpy as np
from numba import float32, njit, prange, uintp

from pycaffe_cli.layers.kernels.cpu.depthwise.phases import CHUNK, phase_layout, \
    phase_places, phase_rows
from pycaffe_cli.layers.kernels.cpu.layout import prange_parts, rectify

# Output rows at least this wide run the nine-tap pass row by row into ``out``; narrower ones
# (MobileNet's 14x14 and 7x7 layers) run it over the grid's flat positions, whose longer
# loop vectorises better, and copy the grid out.
ROWS_MIN_WIDTH = 32


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
def _nine(values, first):
    """values[first:first + 9] as a tuple (weights or phase offsets held in registers)."""
    return (values[first], values[first + 1], values[first + 2], values[first + 3],
            values[first + 4], values[first + 5], values[first + 6], values[first + 7],
            values[first + 8])


@njit(cache=True, inline="always")
def _sum_nine(w, b, x, j):
    """sum over taps t of w[t] x[b[t] + j], from 0, in tap order (``_gather_taps``'s bits)."""
    v = float32(0.0)
    v += w[0] * x[uintp(b[0] + j)]
    v += w[1] * x[uintp(b[1] + j)]
    v += w[2] * x[uintp(b[2] + j)]
    v += w[3] * x[uintp(b[3] + j)]
    v += w[4] * x[uintp(b[4] + j)]
    v += w[5] * x[uintp(b[5] + j)]
    v += w[6] * x[uintp(b[6] + j)]
    v += w[7] * x[uintp(b[7] + j)]
    v += w[8] * x[uintp(b[8] + j)]
    return v


@njit(cache=True, inline="always")
def _nine_taps_to_grid(y, size, w, b, x):
    """y[j] = the nine taps' sum at grid position j, for j < size."""
    for j in range(size):
        y[uintp(j)] = _sum_nine(w, b, x, j)


@njit(cache=True, inline="always")
def _nine_taps_to_rows(w, b, x, qw, out, dst, out_h, out_w, bias, slope, use_relu):
    """out[dst + oh out_w + ow] = the nine taps' sum at grid position oh qw + ow, + bias,
    then ReLU where ``use_relu`` (as ``_from_grid`` finishes it)."""
    for oh in range(out_h):
        row, at = oh * qw, dst + oh * out_w
        for ow in range(out_w):
            value = _sum_nine(w, b, x, row + ow) + bias
            out[uintp(at + ow)] = rectify(value, slope) if use_relu else value


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
                bias_m = bias[m] if use_bias else float32(0.0)
                if per_in == 1 and taps == 9:
                    w, b = _nine(weights, m * 9), _nine(base, 0)
                    dst = (n * out_channels + m) * out_h * out_w
                    if out_w >= ROWS_MIN_WIDTH:
                        _nine_taps_to_rows(w, b, phases, qw, out, dst, out_h, out_w, bias_m,
                                           slope, use_relu)
                    else:
                        _nine_taps_to_grid(y, size, w, b, phases)
                        _from_grid(y, qw, out, dst, out_h, out_w, bias_m, slope, use_relu)
                    continue
                for start in range(0, size, CHUNK):
                    stop = min(start + CHUNK, size)
                    y[start:stop] = 0
                    for c in range(per_in):
                        _gather_taps(y, start, stop, weights, (m * per_in + c) * taps, phases,
                                     c * block, base, taps)
                _from_grid(y, qw, out, (n * out_channels + m) * out_h * out_w, out_h, out_w,
                           bias_m, slope, use_relu)


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
