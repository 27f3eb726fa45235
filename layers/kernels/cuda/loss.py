"""Device pieces shared by the softmax and loss layers (numba.cuda).

Softmax along the channel axis of a flat blob viewed as (outer, channels, inner), in two
gathers and no atomics (Caffe's kernel_channel_max / _sum / _div):

    per position (o, j):   max_c x[o, c, j] and s = sum_c exp(x[o, c, j] - max)   (float32)
    per element:           y[o, c, j] = exp(x[o, c, j] - max) / s

and its backward, dx = (dy - sum_c dy_c y_c) * y, as a per-position dot then a per-element
kernel. Both work in place (``out`` may be ``x``, ``dx`` may be ``dy``).

Loss reductions: ``sum_into`` adds per-element loss terms (or their squares) in float64 and
writes ``sum / divisor`` into a loss top on the device. The sum is a tree of plain grid-stride
kernels, no shared memory or atomics: partial p of a level of m partials adds items p, p + m,
p + 2m, ... of the level below (coalesced reads), each level about FAN_IN times smaller, and
one thread adds the last few. Which items meet in which partial depends on n alone, so the
sum is the same on every run and every launch size, and nothing comes to the host.

``label_counts`` is the one reduction whose result does come to the host: the number of
labels that count (the VALID normaliser, which Caffe syncs too) and the number out of range,
so a bad label raises the same error as on the CPU.

The partial sums live in one float64 buffer shared by every caller (all work runs in order
on one stream), which only ever grows.
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.layers.kernels.cuda import memory
from pycaffe_cli.layers.kernels.cuda.launch import launch

FAN_IN = 32  # values each partial sum adds (coalesced: partial p takes p, p + m, ...)

SUM = 0
SUM_OF_SQUARES = 1
LABEL_COUNTS = 2


# --- softmax ------------------------------------------------------------------------------
@cuda.jit
def _channel_max_sum_kernel(n, x, channels, inner, stats):
    """stats[p] = max over channels at position p, stats[n + p] = sum of exp(x - max)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        start = (index // inner) * channels * inner + index % inner
        peak = x[start]
        for c in range(1, channels):
            value = x[start + c * inner]
            if value > peak:
                peak = value
        total = np.float32(0)
        for c in range(channels):
            total += math.exp(x[start + c * inner] - peak)
        stats[index] = peak
        stats[n + index] = total


@cuda.jit
def _softmax_divide_kernel(n, x, channels, inner, stats, positions, out):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        position = (index // (channels * inner)) * inner + index % inner
        out[index] = math.exp(x[index] - stats[position]) / stats[positions + position]


@cuda.jit
def _channel_dot_kernel(n, y, dy, channels, inner, dots):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        start = (index // inner) * channels * inner + index % inner
        total = np.float32(0)
        for c in range(channels):
            total += dy[start + c * inner] * y[start + c * inner]
        dots[index] = total


@cuda.jit
def _softmax_backward_kernel(n, y, dy, channels, inner, dots, dx):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        position = (index // (channels * inner)) * inner + index % inner
        dx[index] = (dy[index] - dots[position]) * y[index]


def softmax_forward(x, out, outer, channels, inner, stats):
    """out = softmax of the flat device array ``x`` (outer, channels, inner) over channels.

    ``stats`` is a device scratch array of at least 2 * outer * inner values.
    """
    positions = outer * inner
    launch(_channel_max_sum_kernel, positions, x, channels, inner, stats)
    launch(_softmax_divide_kernel, positions * channels, x, channels, inner, stats, positions,
           out)


def softmax_backward(y, dy, dx, outer, channels, inner, dots):
    """dx = (dy - sum_c dy_c y_c) * y; ``dots`` is scratch of at least outer * inner values."""
    positions = outer * inner
    launch(_channel_dot_kernel, positions, y, dy, channels, inner, dots)
    launch(_softmax_backward_kernel, positions * channels, y, dy, channels, inner, dots, dx)


# --- labels -------------------------------------------------------------------------------
@cuda.jit(device=True)
def label_class(value, num_classes, ignore_label, has_ignore):
    """The class a label value names (truncated, as the CPU's astype(int64)), or -1 when it
    is the ignore label or out of [0, num_classes)."""
    label = int(value)
    if has_ignore and label == ignore_label:
        return -1
    if label < 0 or label >= num_classes:
        return -1
    return label


# --- reductions ---------------------------------------------------------------------------
@cuda.jit
def _first_level_kernel(m, n, op, x, num_classes, ignore_label, has_ignore, first, second):
    """Partial p adds items p, p + m, p + 2m, ... of x into first[p] (and second[p]).

    SUM: x; SUM_OF_SQUARES: x^2; LABEL_COUNTS: labels that count (first) and labels outside
    [0, num_classes) that are not ignored (second; num_classes 0: no range check).
    """
    for p in range(cuda.grid(1), m, cuda.gridsize(1)):
        total = 0.0
        bad = 0.0
        for index in range(p, n, m):
            value = x[index]
            if op == SUM:
                total += np.float64(value)
            elif op == SUM_OF_SQUARES:
                total += np.float64(value) * np.float64(value)
            else:
                label = int(value)
                if has_ignore and label == ignore_label:
                    continue
                if num_classes > 0 and (label < 0 or label >= num_classes):
                    bad += 1.0
                else:
                    total += 1.0
        first[p] = total
        if op == LABEL_COUNTS:
            second[p] = bad


@cuda.jit
def _next_level_kernel(m, n, sums, out):
    """out[p] = sums[p] + sums[p + m] + ... (of the first n)."""
    for p in range(cuda.grid(1), m, cuda.gridsize(1)):
        total = 0.0
        for index in range(p, n, m):
            total += sums[index]
        out[p] = total


@cuda.jit
def _finish_kernel(one, n, sums, divisor, out):
    """out[0] = (sums[0] + ... + sums[n - 1]) / divisor, rounded once to float32."""
    for _ in range(cuda.grid(1), one, cuda.gridsize(1)):
        total = 0.0
        for index in range(n):
            total += sums[index]
        out[0] = np.float32(total / divisor)


_buffer = [None]  # the shared float64 partial-sums buffer (see the module doc)


def _partials(count):
    """The first ``count`` values of the shared partial-sums buffer (grown when needed)."""
    if _buffer[0] is None or _buffer[0].size < count:
        _buffer[0] = cuda.device_array(count, np.float64)
    return _buffer[0][:count]


def _levels(n):
    """Sizes of the partial-sum levels for n > 0 values: ceil(n / FAN_IN), then again while
    more than FAN_IN remain."""
    sizes = [-(-n // FAN_IN)]
    while sizes[-1] > FAN_IN:
        sizes.append(-(-sizes[-1] // FAN_IN))
    return sizes


def _split(buffer, sizes):
    """Consecutive slices of ``buffer`` with the given sizes."""
    ends = np.cumsum([0] + sizes)
    return [buffer[int(start):int(end)] for start, end in zip(ends, ends[1:])]


def _fold(levels):
    """Add each level of partial sums into the next; the last level holds <= FAN_IN values."""
    for level, following in zip(levels, levels[1:]):
        launch(_next_level_kernel, following.size, level.size, level, following)
    return levels[-1]


def sum_into(n, terms, divisor, out, square=False):
    """out[0] = sum(terms[:n]) / divisor (sum of squares when ``square``), added in float64
    and written on the device; ``out`` is a loss top's flat device view."""
    if n == 0:
        memory.fill(out, 0)
        return
    sizes = _levels(n)
    levels = _split(_partials(sum(sizes)), sizes)
    launch(_first_level_kernel, sizes[0], n, SUM_OF_SQUARES if square else SUM, terms, 0, 0,
           False, levels[0], levels[0])
    last = _fold(levels)
    launch(_finish_kernel, 1, last.size, last, np.float64(divisor), out)


def label_counts(n, labels, num_classes, ignore_label):
    """(labels that count, labels out of range) among the first ``n`` label values: one
    two-value copy to the host. ``num_classes`` 0 skips the range check; ``ignore_label``
    None ignores nothing."""
    if n == 0:
        return 0, 0
    sizes = _levels(n)
    total = sum(sizes)
    buffer = _partials(2 + 2 * total)
    first = _split(buffer[2:2 + total], sizes)
    second = _split(buffer[2 + total:], sizes)
    has_ignore = ignore_label is not None
    launch(_first_level_kernel, sizes[0], n, LABEL_COUNTS, labels, num_classes,
           int(ignore_label) if has_ignore else 0, has_ignore, first[0], second[0])
    for index, levels in enumerate((first, second)):
        last = _fold(levels)
        launch(_next_level_kernel, 1, last.size, last, buffer[index:index + 1])
    valid, bad = buffer[:2].copy_to_host()
    return int(valid), int(bad)
