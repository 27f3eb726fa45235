"""Softmax over rows of a flat (rows, cols) array, around numpy's exp (CPU, numba).

Where Softmax's axis is the last one with extent over 1 (a classifier's (N, C) output), the
numpy form of softmax_forward (layers/softmax.py) is five numpy calls, and at batch 1 each
costs more than the work after a forward pass has filled the caches with other data
(docs/kernel-choices.md, "Softmax rows"). These kernels do the max and the normalisation as two
numba calls, with numpy's own float32 exp between them; the sum runs in numpy's pairwise
order, so the result is the numpy form's bit for bit.
"""
from numba import njit, uintp

from pycaffe_cli.layers.kernels.cpu.layout import pairwise_sum


@njit(cache=True, nogil=True)
def shift_by_row_max(x, out, rows, cols):
    """out[r, c] = x[r, c] - max over c of x[r, c] (NaN through a row holding a NaN, as
    numpy's max); ``out`` may be ``x``."""
    for r in range(rows):
        base = r * cols
        peak = x[uintp(base)]
        for c in range(1, cols):
            value = x[uintp(base + c)]
            if value != value:  # NaN: the row's max is NaN
                peak = value
                break
            if value > peak:
                peak = value
        for c in range(cols):
            out[uintp(base + c)] = x[uintp(base + c)] - peak


@njit(cache=True, nogil=True)
def divide_by_row_sums(out, rows, cols):
    """out[r, c] /= the sum of row r (numpy's pairwise float32 sum)."""
    for r in range(rows):
        base = r * cols
        total = pairwise_sum(out, base, cols)
        for c in range(cols):
            out[uintp(base + c)] /= total
