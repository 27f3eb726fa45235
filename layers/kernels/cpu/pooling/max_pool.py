"""MAX pooling kernels (Caffe's PoolingLayer MAX) over planes of shape (N*C, H, W) (CPU, numba).

Forward: the first maximum of each window in row-major order (``>``: NaNs are skipped); a
window with no value above -FLT_MAX gives -FLT_MAX and index -1. Masks hold the argmax as the
in-plane index ``h * width + w``: int32 in the layer's own buffer, float32 when the mask is the
layer's second top. One plane per ``prange`` job, with the window bounds of every output row
and column computed once per call (window.py). Square 2x2 and 3x3 windows with stride 2 run
kernels with the window written in; the inference plan's forward-only pass computes no mask
(``max_pool_forward_values``).

Backward SCATTERS within the plane, in row-major window order -- the order of Caffe's CPU
loops -- and one job owns a whole plane, so no two threads write the same element (the GPU
twin gathers per pixel instead, as the STOCHASTIC kernels do).
"""
import numpy as np
from numba import njit, prange, uintp

from pycaffe_cli.layers.kernels.cpu.layout import prange_parts
from pycaffe_cli.layers.kernels.cpu.pooling.window import FLT_MAX, inner_outputs_py, \
    inner_range, window_bounds


@njit(cache=True, inline="always")
def _max_step(value, index, maxval, maxidx):
    """One step of the running (max, argmax): the first maximum wins (``>``, so NaNs are
    skipped). Selects rather than a branch, which random data mispredicts."""
    better = value > maxval
    return (value if better else maxval), (index if better else maxidx)


def max_pool_forward(bottom, top, mask, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w):
    """Max pooling of ``bottom`` (P, H, W) into ``top`` and ``mask`` (P, PH, PW): the first
    maximum of each window in row-major order; a window with no value above -FLT_MAX gives
    -FLT_MAX and index -1.

    Square 2x2 and 3x3 windows with stride 2 (LeNet's, CaffeNet's, GoogLeNet's and ResNet's
    pools) run ``_max_pool_2x2`` / ``_max_pool_3x3``, with the window and stride written in:
    faster on those nets' pools (docs/kernel-choices.md, "Max pooling")."""
    square = _square_kernel(kernel_h, kernel_w, stride_h, stride_w)
    if square is not None:
        square(bottom, top, mask, pad_h, pad_w, True)
    else:
        _max_pool_any(bottom, top, mask, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w)


def _square_kernel(kernel_h, kernel_w, stride_h, stride_w):
    """``_max_pool_2x2`` or ``_max_pool_3x3`` for their windows and stride, else None."""
    if kernel_h != kernel_w or stride_h != 2 or stride_w != 2:
        return None
    return {2: _max_pool_2x2, 3: _max_pool_3x3}.get(kernel_w)


@njit(cache=True, inline="always")
def _max_of(maxval, maxidx, value, index):
    """``_max_step`` for a candidate that is itself a window part's (max, argmax): an
    earlier part keeps ties, so combining parts in row-major order gives the running
    (max, argmax) of the whole window."""
    return _max_step(value, index, maxval, maxidx)


@njit(cache=True, inline="always")
def _max_of_2(line, w, at):
    """(max, argmax) of line[w], line[w + 1] (in-plane indices at + w, ...), from -FLT_MAX."""
    maxval, maxidx = _max_step(line[uintp(w)], at + w, np.float32(-FLT_MAX), -1)
    return _max_step(line[uintp(w + 1)], at + w + 1, maxval, maxidx)


@njit(cache=True, inline="always")
def _max_of_3(line, w, at):
    maxval, maxidx = _max_of_2(line, w, at)
    return _max_step(line[uintp(w + 2)], at + w + 2, maxval, maxidx)


@njit(cache=True, inline="always")
def _clipped_window(plane, rows, cols, ph, pw, out, out_mask, with_mask):
    """Output (ph, pw), element by element."""
    width = plane.shape[1]
    maxval = np.float32(-FLT_MAX)
    maxidx = -1
    for h in range(rows[ph, 0], rows[ph, 1]):
        line = plane[uintp(h)]
        for w in range(cols[pw, 0], cols[pw, 1]):
            maxval, maxidx = _max_step(line[uintp(w)], h * width + w, maxval, maxidx)
    out[uintp(pw)] = maxval
    if with_mask:
        out_mask[uintp(pw)] = maxidx


@njit(cache=True)
def _clipped_windows(plane, rows, cols, ph, inner_lo, inner_hi, out, out_mask, with_mask):
    """The outputs of row ph outside [inner_lo, inner_hi), element by element: the windows
    the borders clip (the whole row where inner_lo = inner_hi = its length). A call of its
    own, not inlined: in the loop of the inner windows its code slowed them down
    (docs/kernel-choices.md, "Max pooling")."""
    for pw in range(inner_lo):
        _clipped_window(plane, rows, cols, ph, pw, out, out_mask, with_mask)
    for pw in range(inner_hi, out.shape[0]):
        _clipped_window(plane, rows, cols, ph, pw, out, out_mask, with_mask)


@njit(cache=True, inline="always")
def _square_setup(bottom, top, kernel, pad_h, pad_w):
    """Window bounds along both axes, and the [lo, hi) outputs whose windows lie inside."""
    rows = window_bounds(top.shape[1], kernel, 2, pad_h, bottom.shape[1])
    cols = window_bounds(top.shape[2], kernel, 2, pad_w, bottom.shape[2])
    h_lo, h_hi = inner_range(bottom.shape[1], top.shape[1], kernel, 2, pad_h)
    w_lo, w_hi = inner_range(bottom.shape[2], top.shape[2], kernel, 2, pad_w)
    return rows, cols, h_lo, h_hi, w_lo, w_hi


# Two kernels, one a window size, each with its inner loop written out: one kernel taking
# the size as an argument (a branch per output row) ran slower, more so without the mask
# (docs/kernel-choices.md, "Max pooling"); numba's ``literally`` recompiled at every call,
# and kernels made by a factory function are not cached between runs.
@njit(cache=True, parallel=True, nogil=True)
def _max_pool_2x2(bottom, top, mask, pad_h, pad_w, with_mask):
    """2x2 windows, stride 2: inner windows a window row at a time, then the rows combined;
    the clipped ones by ``_clipped_windows``. Without ``with_mask`` only ``top`` is written
    (``mask``: any (1, PH, PW) array, untouched)."""
    width, pooled_w = bottom.shape[2], top.shape[2]
    rows, cols, h_lo, h_hi, w_lo, w_hi = _square_setup(bottom, top, 2, pad_h, pad_w)
    for p in prange(top.shape[0]):
        plane = bottom[uintp(p)]
        for ph in range(top.shape[1]):
            out, out_mask = top[uintp(p), uintp(ph)], mask[uintp(p) * with_mask, uintp(ph)]
            if ph < h_lo or ph >= h_hi:
                _clipped_windows(plane, rows, cols, ph, pooled_w, pooled_w, out, out_mask,
                                 with_mask)
                continue
            h0 = 2 * ph - pad_h
            line0, line1 = plane[uintp(h0)], plane[uintp(h0 + 1)]
            for pw in range(w_lo, w_hi):
                w = 2 * pw - pad_w
                maxval, maxidx = _max_of_2(line0, w, h0 * width)
                value, index = _max_of_2(line1, w, (h0 + 1) * width)
                maxval, maxidx = _max_of(maxval, maxidx, value, index)
                out[uintp(pw)] = maxval
                if with_mask:
                    out_mask[uintp(pw)] = maxidx
            if w_hi - w_lo < pooled_w:
                _clipped_windows(plane, rows, cols, ph, w_lo, w_hi, out, out_mask, with_mask)


@njit(cache=True, parallel=True, nogil=True)
def _max_pool_3x3(bottom, top, mask, pad_h, pad_w, with_mask):
    """``_max_pool_2x2`` for 3x3 windows, stride 2."""
    width, pooled_w = bottom.shape[2], top.shape[2]
    rows, cols, h_lo, h_hi, w_lo, w_hi = _square_setup(bottom, top, 3, pad_h, pad_w)
    for p in prange(top.shape[0]):
        plane = bottom[uintp(p)]
        for ph in range(top.shape[1]):
            out, out_mask = top[uintp(p), uintp(ph)], mask[uintp(p) * with_mask, uintp(ph)]
            if ph < h_lo or ph >= h_hi:
                _clipped_windows(plane, rows, cols, ph, pooled_w, pooled_w, out, out_mask,
                                 with_mask)
                continue
            h0 = 2 * ph - pad_h
            line0, line1, line2 = plane[uintp(h0)], plane[uintp(h0 + 1)], plane[uintp(h0 + 2)]
            for pw in range(w_lo, w_hi):
                w = 2 * pw - pad_w
                maxval, maxidx = _max_of_3(line0, w, h0 * width)
                value, index = _max_of_3(line1, w, (h0 + 1) * width)
                maxval, maxidx = _max_of(maxval, maxidx, value, index)
                value, index = _max_of_3(line2, w, (h0 + 2) * width)
                maxval, maxidx = _max_of(maxval, maxidx, value, index)
                out[uintp(pw)] = maxval
                if with_mask:
                    out_mask[uintp(pw)] = maxidx
            if w_hi - w_lo < pooled_w:
                _clipped_windows(plane, rows, cols, ph, w_lo, w_hi, out, out_mask, with_mask)


@njit(cache=True, parallel=True, nogil=True)
def _max_pool_any(bottom, top, mask, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w):
    """``max_pool_forward`` for any window. Window rows 2 and 3 wide are unrolled (loop
    overhead was most of the time)."""
    width = bottom.shape[2]
    rows = window_bounds(top.shape[1], kernel_h, stride_h, pad_h, bottom.shape[1])
    cols = window_bounds(top.shape[2], kernel_w, stride_w, pad_w, width)
    for p in prange(top.shape[0]):
        plane = bottom[uintp(p)]
        for ph in range(top.shape[1]):
            h0, h1 = rows[ph, 0], rows[ph, 1]
            for pw in range(top.shape[2]):
                w0, w1 = cols[pw, 0], cols[pw, 1]
                maxval = np.float32(-FLT_MAX)
                maxidx = -1
                for h in range(h0, h1):
                    line = plane[uintp(h)]
                    at = h * width
                    if w1 - w0 == 2:
                        maxval, maxidx = _max_step(line[uintp(w0)], at + w0, maxval, maxidx)
                        maxval, maxidx = _max_step(line[uintp(w0 + 1)], at + w0 + 1, maxval,
                                                   maxidx)
                    elif w1 - w0 == 3:
                        maxval, maxidx = _max_step(line[uintp(w0)], at + w0, maxval, maxidx)
                        maxval, maxidx = _max_step(line[uintp(w0 + 1)], at + w0 + 1, maxval,
                                                   maxidx)
                        maxval, maxidx = _max_step(line[uintp(w0 + 2)], at + w0 + 2, maxval,
                                                   maxidx)
                    else:
                        for w in range(w0, w1):
                            maxval, maxidx = _max_step(line[uintp(w)], at + w, maxval, maxidx)
                top[uintp(p), uintp(ph), uintp(pw)] = maxval
                mask[uintp(p), uintp(ph), uintp(pw)] = maxidx


@njit(cache=True, nogil=True, inline="always")
def _clipped_max(column_max, out, cols, first, stop):
    for pw in range(first, stop):
        maxval = np.float32(-FLT_MAX)
        for w in range(cols[pw, 0], cols[pw, 1]):
            value = column_max[uintp(w)]
            maxval = value if value > maxval else maxval
        out[uintp(pw)] = maxval


@njit(cache=True, nogil=True, inline="always")
def _row_max(column_max, out, cols, kernel_w, stride_w, pad_w, inner_lo, inner_hi):
    """out[pw] = the maximum of ``column_max`` over window pw's columns: the clipped
    windows one by one, the inner ones a window column at a time (it vectorises)."""
    _clipped_max(column_max, out, cols, 0, inner_lo)
    _clipped_max(column_max, out, cols, inner_hi, out.shape[0])
    for pw in range(inner_lo, inner_hi):
        out[uintp(pw)] = column_max[uintp(pw * stride_w - pad_w)]
    for j in range(1, kernel_w):
        for pw in range(inner_lo, inner_hi):
            value = column_max[uintp(pw * stride_w - pad_w + j)]
            best = out[uintp(pw)]
            out[uintp(pw)] = value if value > best else best


def max_pool_forward_values(bottom, top, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w):
    """``max_pool_forward``'s ``top`` without the mask, for forward-only runs: each output
    row first takes the maximum down its window's rows for every column (contiguous: it
    vectorises), then across each window's columns. The maximum is exact whatever the
    order, and ``>`` still skips NaNs and floors at -FLT_MAX, so ``top`` is the same. The
    planes run in a few parts per thread, each with one scratch row (small planes are many:
    GoogLeNet's last pools have 8,320 of 7 x 7).

    Square stride-2 windows that all lie inside the plane (SqueezeNet's, LeNet's) run
    ``max_pool_forward``'s kernels without the mask instead, which is faster; with windows
    the borders clip (ceil rounding, padding), those were slower than this
    (docs/kernel-choices.md, "Max pooling")."""
    square = _square_kernel(kernel_h, kernel_w, stride_h, stride_w)
    if square is not None and no_border(bottom.shape, top.shape, kernel_w, pad_h, pad_w):
        square(bottom, top, np.empty((1,) + top.shape[1:], np.int32), pad_h, pad_w, False)
        return
    _max_values(bottom, top, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w,
                prange_parts(top.shape[0]))


def no_border(bottom_shape, top_shape, kernel, pad_h, pad_w):
    """Whether every stride-2 ``kernel`` x ``kernel`` window lies inside the plane."""
    rows = inner_outputs_py(bottom_shape[1], top_shape[1], kernel, 2, pad_h)
    cols = inner_outputs_py(bottom_shape[2], top_shape[2], kernel, 2, pad_w)
    return rows == (0, top_shape[1]) and cols == (0, top_shape[2])


@njit(cache=True, parallel=True, nogil=True)
def _max_values(bottom, top, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, parts):
    width = bottom.shape[2]
    rows = window_bounds(top.shape[1], kernel_h, stride_h, pad_h, bottom.shape[1])
    cols = window_bounds(top.shape[2], kernel_w, stride_w, pad_w, width)
    inner_lo, inner_hi = inner_range(width, top.shape[2], kernel_w, stride_w, pad_w)
    planes = top.shape[0]
    for part in prange(parts):
        column_max = np.empty(width, np.float32)
        for p in range(part * planes // parts, (part + 1) * planes // parts):
            plane = bottom[uintp(p)]
            for ph in range(top.shape[1]):
                column_max[:] = np.float32(-FLT_MAX)
                for h in range(rows[ph, 0], rows[ph, 1]):
                    line = plane[uintp(h)]
                    for w in range(width):
                        value = line[uintp(w)]
                        best = column_max[uintp(w)]
                        column_max[uintp(w)] = value if value > best else best
                _row_max(column_max, top[uintp(p), uintp(ph)], cols, kernel_w, stride_w,
                         pad_w, inner_lo, inner_hi)


@njit(cache=True, parallel=True, nogil=True)
def max_pool_backward(top_diff, mask, bottom_diff, kernel_h, kernel_w, stride_h, stride_w,
                      pad_h, pad_w):
    """Route each top diff to its window's argmax; writes every element of ``bottom_diff``.

    Each plane adds its top diffs in row-major window order, Caffe's order. Indices outside
    the plane (-1: a window with no maximum) are skipped. The window arguments are unused:
    the mask says where each diff goes.
    """
    size = bottom_diff.shape[1] * bottom_diff.shape[2]
    for p in prange(bottom_diff.shape[0]):
        plane = bottom_diff[uintp(p)].reshape(size)
        plane[:] = 0
        for ph in range(top_diff.shape[1]):
            for pw in range(top_diff.shape[2]):
                index = mask[uintp(p), uintp(ph), uintp(pw)]
                if index >= 0 and index < size:  # False for NaN too
                    plane[uintp(int(index))] += top_diff[uintp(p), uintp(ph), uintp(pw)]
