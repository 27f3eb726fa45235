"""Device pieces shared by the softmax and loss layers (numba.cuda).

Softmax along the channel axis of a flat blob viewed as (outer, channels, inner), in two
gathers and no atomics (Caffe's kernel_channel_max / _sum / _div):

    per position (o, j):   max_c x[o, c, j] and s = sum_c exp(x[o, c, j] - max)   (float32)
    per element:           y[o, c, j] = exp(x[o, c, j] - max) / s

and its backward, dx = (dy - sum_c dy_c y_c) * y, as a per-position dot then a per-element
kernel. Both work in place (``out`` may be ``x``, ``dx`` may be ``dy``).

Loss reductions: ``sum_into`` adds per-element loss terms (or their squares) in float64 and
writes ``sum / divisor`` into a loss top on the device (pycaffe_cli/cuda/math.py's reduction
tree: the same sum on every run, nothing comes to the host).

``label_counts`` is the one reduction whose result does come to the host: the number of
labels that count (the VALID normaliser, which Caffe syncs too) and the number out of range,
so a bad label raises the same error as on the CPU.
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.cuda import math as gpu_math
from pycaffe_cli.cuda.launch import launch


# --- softmax ------------------------------------------------------------------------------
@cuda.jit(cache=True)
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


@cuda.jit(cache=True)
def _softmax_divide_kernel(n, x, channels, inner, stats, positions, out):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        position = (index // (channels * inner)) * inner + index % inner
        out[index] = math.exp(x[index] - stats[position]) / stats[positions + position]


@cuda.jit(cache=True)
def _channel_dot_kernel(n, y, dy, channels, inner, dots):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        start = (index // inner) * channels * inner + index % inner
        total = np.float32(0)
        for c in range(channels):
            total += dy[start + c * inner] * y[start + c * inner]
        dots[index] = total


@cuda.jit(cache=True)
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
@cuda.jit(cache=True)
def _label_counts_kernel(m, n, labels, num_classes, ignore_label, has_ignore, valid, bad):
    """Partial p counts, over labels p, p + m, ...: those that count (valid) and those outside
    [0, num_classes) that are not ignored (bad; num_classes 0: no range check)."""
    for p in range(cuda.grid(1), m, cuda.gridsize(1)):
        good = 0.0
        wrong = 0.0
        for index in range(p, n, m):
            label = int(labels[index])
            if has_ignore and label == ignore_label:
                continue
            if num_classes > 0 and (label < 0 or label >= num_classes):
                wrong += 1.0
            else:
                good += 1.0
        valid[p] = good
        bad[p] = wrong


def sum_into(n, terms, divisor, out, square=False):
    """out[0] = sum(terms[:n]) / divisor (sum of squares when ``square``), added in float64
    and written on the device; ``out`` is a loss top's flat device view."""
    gpu_math.reduce_into(n, gpu_math.SUMSQ if square else gpu_math.SUM, terms, terms, divisor,
                         out)


def label_counts(n, labels, num_classes, ignore_label):
    """(labels that count, labels out of range) among the first ``n`` label values: one
    two-value copy to the host. ``num_classes`` 0 skips the range check; ``ignore_label``
    None ignores nothing."""
    if n == 0:
        return 0, 0
    sizes = gpu_math.level_sizes(n)
    total = sum(sizes)
    buffer = gpu_math.partials(2 + 2 * total)
    valid = gpu_math.split(buffer[2:2 + total], sizes)
    bad = gpu_math.split(buffer[2 + total:], sizes)
    has_ignore = ignore_label is not None
    launch(_label_counts_kernel, sizes[0], n, labels, num_classes,
           int(ignore_label) if has_ignore else 0, has_ignore, valid[0], bad[0])
    for index, levels in enumerate((valid, bad)):
        last = gpu_math.fold(levels)
        launch(gpu_math._next_level_kernel, 1, last.size, last, buffer[index:index + 1])
    counts = buffer[:2].copy_to_host()
    return int(counts[0]), int(counts[1])
