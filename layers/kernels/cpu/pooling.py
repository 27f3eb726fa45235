"""Pooling kernels (Caffe's PoolingLayer maths) over planes of shape (N*C, H, W).

MAX and AVE run one plane per ``prange`` job with the window bounds of every output row and
column computed once per call. Their backward passes SCATTER within the plane, in row-major
window order -- the order of Caffe's CPU loops -- and one job owns a whole plane, so no two
threads write the same element (a GPU port would gather per pixel instead, as the STOCHASTIC
kernels below do). Indices are cast to ``uintp``: numba cannot prove a signed index
non-negative, and its wraparound handling made these loops several times slower.

STOCHASTIC works per output element (forward) or per input element (backward): a plain
Python function ``*_at_py`` run under a ``prange`` over the planes (inlined at numba-IR level
with ``inline="always"``: as plain calls they run at half the speed); its backward passes
GATHER: an input pixel visits the output windows that can contain it (``window_range``).

The window of output (ph, pw) is rows [ph * stride_h - pad_h, ... + kernel_h) and likewise for
columns, clipped to the image. AVE divides by the window clipped to the PADDED image instead:
``pool_size = (min(hstart + kernel_h, height + pad_h) - hstart) * (same for w)``. Sums run in
float32 in Caffe's order (row-major over a window; across windows, row-major over the
windows), so the numbers are Caffe CPU's. Masks hold the argmax as the in-plane index
``h * width + w``: int32 in the layer's own buffer, float32 when the mask is the layer's
second top.
"""
import numpy as np
from numba import njit, prange, uintp

from pycaffe_cli.layers.kernels.cpu.layout import prange_parts

FLT_MAX = float(np.finfo(np.float32).max)
FLT_MIN = float(np.finfo(np.float32).tiny)


# --- which outputs can see an input pixel ---------------------------------------------------
def window_range_py(pos, kernel, stride, pooled):
    """[first, last) outputs whose window [o * stride, o * stride + kernel) holds ``pos``
    (``pos`` already shifted by the padding)."""
    first = 0 if pos < kernel else (pos - kernel) // stride + 1
    last = min(pos // stride + 1, pooled)
    return first, last


window_range = njit(cache=True)(window_range_py)


@njit(cache=True, nogil=True)
def _window_ranges(bottom, top, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w):
    """``window_range`` for every row and every column, computed once per call (the CPU
    drivers look them up instead of dividing per pixel)."""
    rows = np.empty((bottom.shape[1], 2), np.int64)
    cols = np.empty((bottom.shape[2], 2), np.int64)
    for h in range(bottom.shape[1]):
        rows[h, 0], rows[h, 1] = window_range(h + pad_h, kernel_h, stride_h, top.shape[1])
    for w in range(bottom.shape[2]):
        cols[w, 0], cols[w, 1] = window_range(w + pad_w, kernel_w, stride_w, top.shape[2])
    return rows, cols


# --- MAX and AVE: one plane per job, window bounds computed once per call -------------------
@njit(cache=True, nogil=True)
def _window_bounds(pooled, kernel, stride, pad, size):
    """Row o: [start, end) of window o along one axis, clipped to the image, and the extent
    Caffe's AVE divides by (the window clipped to the padded image)."""
    bounds = np.empty((pooled, 3), np.int64)
    for o in range(pooled):
        start = o * stride - pad
        bounds[o, 0] = max(start, 0)
        bounds[o, 1] = min(start + kernel, size)
        bounds[o, 2] = min(start + kernel, size + pad) - start
    return bounds


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
    1.4-3x faster on those nets' pools (BENCHMARKS.md)."""
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
    own, not inlined: in the loop of the inner windows its code slowed them by ~30%."""
    for pw in range(inner_lo):
        _clipped_window(plane, rows, cols, ph, pw, out, out_mask, with_mask)
    for pw in range(inner_hi, out.shape[0]):
        _clipped_window(plane, rows, cols, ph, pw, out, out_mask, with_mask)


@njit(cache=True, inline="always")
def _square_setup(bottom, top, kernel, pad_h, pad_w):
    """Window bounds along both axes, and the [lo, hi) outputs whose windows lie inside."""
    rows = _window_bounds(top.shape[1], kernel, 2, pad_h, bottom.shape[1])
    cols = _window_bounds(top.shape[2], kernel, 2, pad_w, bottom.shape[2])
    h_lo, h_hi = _inner_range(bottom.shape[1], top.shape[1], kernel, 2, pad_h)
    w_lo, w_hi = _inner_range(bottom.shape[2], top.shape[2], kernel, 2, pad_w)
    return rows, cols, h_lo, h_hi, w_lo, w_hi


# Two kernels, one a window size, each with its inner loop written out: one kernel taking
# the size as an argument (a branch per output row) ran 3-25% slower, 15-40% without the
# mask; numba's ``literally`` recompiled at every call, and kernels made by a factory
# function are not cached between runs.
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


def inner_outputs_py(size, pooled, kernel, stride, pad):
    """[lo, hi): the outputs along one axis whose window lies inside the image."""
    lo = min((pad + stride - 1) // stride, pooled)
    hi = max(min((size - kernel + pad) // stride + 1, pooled), lo)
    return lo, hi


_inner_range = njit(cache=True)(inner_outputs_py)


@njit(cache=True, parallel=True, nogil=True)
def _max_pool_any(bottom, top, mask, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w):
    """``max_pool_forward`` for any window. Window rows 2 and 3 wide are unrolled (loop
    overhead was most of the time)."""
    width = bottom.shape[2]
    rows = _window_bounds(top.shape[1], kernel_h, stride_h, pad_h, bottom.shape[1])
    cols = _window_bounds(top.shape[2], kernel_w, stride_w, pad_w, width)
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
    ``max_pool_forward``'s kernels without the mask instead: 1.2-1.9x faster. With windows
    the borders clip (ceil rounding, padding), those were slower than this."""
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
    rows = _window_bounds(top.shape[1], kernel_h, stride_h, pad_h, bottom.shape[1])
    cols = _window_bounds(top.shape[2], kernel_w, stride_w, pad_w, width)
    inner_lo, inner_hi = _inner_range(width, top.shape[2], kernel_w, stride_w, pad_w)
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


def ave_pool_forward(bottom, top, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w):
    """Average pooling of ``bottom`` (P, H, W) into ``top`` (P, PH, PW): the window's sum
    (row-major, float32) divided by its size clipped to the padded image. A window that is
    the whole plane (global pooling: SqueezeNet's pool10, GoogLeNet's pool5) runs
    ``_global_average``."""
    if top.shape[1:] == (1, 1) and (kernel_h, kernel_w) == bottom.shape[1:] \
            and pad_h == pad_w == 0:
        _global_average(bottom, top)
    else:
        _ave_pool_any(bottom, top, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w)


GLOBAL_GROUP = 8  # planes summed side by side by _global_average


@njit(cache=True, inline="always")
def _plane_sum(flat, p, size):
    total = np.float32(0.0)
    for i in range(size):
        total += flat[uintp(p), uintp(i)]
    return total


@njit(cache=True, parallel=True, nogil=True)
def _global_average(bottom, top):
    """top[p] = the mean of plane p, each plane summed element by element (Caffe's order,
    as ``_ave_pool_any`` sums a window). Eight planes side by side, each with its own
    running sum: one plane's sum is a chain of dependent additions, so eight chains keep
    the adder busy (2-3x faster: SqueezeNet's 1,000 planes of 13x13, 64 -> 29 us; 10,000
    of them 481 -> 162 us). With eight accumulators in an array it ran 1.4-2.6x slower
    than written out."""
    planes = bottom.shape[0]
    size = bottom.shape[1] * bottom.shape[2]
    flat = bottom.reshape(planes, size)
    out = top.reshape(planes)
    count = np.float32(size)
    for group in prange((planes + GLOBAL_GROUP - 1) // GLOBAL_GROUP):
        p = uintp(group * GLOBAL_GROUP)
        if p + GLOBAL_GROUP > planes:
            for q in range(p, planes):
                out[uintp(q)] = _plane_sum(flat, q, size) / count
            continue
        t0 = t1 = t2 = t3 = t4 = t5 = t6 = t7 = np.float32(0.0)
        for i in range(size):
            at = uintp(i)
            t0 += flat[p, at]
            t1 += flat[p + 1, at]
            t2 += flat[p + 2, at]
            t3 += flat[p + 3, at]
            t4 += flat[p + 4, at]
            t5 += flat[p + 5, at]
            t6 += flat[p + 6, at]
            t7 += flat[p + 7, at]
        out[p], out[p + 1], out[p + 2], out[p + 3] = t0 / count, t1 / count, t2 / count, \
            t3 / count
        out[p + 4], out[p + 5], out[p + 6], out[p + 7] = t4 / count, t5 / count, \
            t6 / count, t7 / count


@njit(cache=True, parallel=True, nogil=True)
def _ave_pool_any(bottom, top, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w):
    """``ave_pool_forward`` for any window."""
    rows = _window_bounds(top.shape[1], kernel_h, stride_h, pad_h, bottom.shape[1])
    cols = _window_bounds(top.shape[2], kernel_w, stride_w, pad_w, bottom.shape[2])
    for p in prange(top.shape[0]):
        plane = bottom[uintp(p)]
        for ph in range(top.shape[1]):
            for pw in range(top.shape[2]):
                total = np.float32(0.0)
                for h in range(rows[ph, 0], rows[ph, 1]):
                    for w in range(cols[pw, 0], cols[pw, 1]):
                        total += plane[uintp(h), uintp(w)]
                top[uintp(p), uintp(ph), uintp(pw)] = total / np.float32(rows[ph, 2]
                                                                         * cols[pw, 2])


@njit(cache=True, parallel=True, nogil=True)
def ave_pool_backward(top_diff, bottom_diff, kernel_h, kernel_w, stride_h, stride_w, pad_h,
                      pad_w):
    """Spread each top diff evenly over its window; writes every element of ``bottom_diff``.

    Each plane adds the windows' shares in row-major window order, Caffe's order.
    """
    height, width = bottom_diff.shape[1], bottom_diff.shape[2]
    rows = _window_bounds(top_diff.shape[1], kernel_h, stride_h, pad_h, height)
    cols = _window_bounds(top_diff.shape[2], kernel_w, stride_w, pad_w, width)
    for p in prange(bottom_diff.shape[0]):
        plane = bottom_diff[uintp(p)]
        for h in range(height):
            for w in range(width):
                plane[uintp(h), uintp(w)] = 0
        for ph in range(top_diff.shape[1]):
            for pw in range(top_diff.shape[2]):
                size = np.float32(rows[ph, 2] * cols[pw, 2])
                share = top_diff[uintp(p), uintp(ph), uintp(pw)] / size
                for h in range(rows[ph, 0], rows[ph, 1]):
                    for w in range(cols[pw, 0], cols[pw, 1]):
                        plane[uintp(h), uintp(w)] += share


# --- STOCHASTIC (no padding) ----------------------------------------------------------------
def sto_pool_train_at_py(bottom, uniform, top, rand_idx, p, ph, pw, kernel_h, kernel_w,
                         stride_h, stride_w):
    """Sample a window position with probability proportional to its activation.

    With u = uniform[p, ph, pw] in (0, 1] and S the window sum, the first position whose
    running sum reaches u * S is taken (pooling_layer.cu's StoPoolForwardTrain).
    """
    height, width = bottom.shape[1], bottom.shape[2]
    hstart = ph * stride_h
    wstart = pw * stride_w
    hend = min(hstart + kernel_h, height)
    wend = min(wstart + kernel_w, width)
    cumsum = np.float32(0.0)
    for h in range(hstart, hend):
        for w in range(wstart, wend):
            cumsum += bottom[p, h, w]
    threshold = uniform[p, ph, pw] * cumsum
    top[p, ph, pw] = 0.0
    rand_idx[p, ph, pw] = -1
    cumsum = np.float32(0.0)
    for h in range(hstart, hend):
        for w in range(wstart, wend):
            cumsum += bottom[p, h, w]
            if cumsum >= threshold:
                top[p, ph, pw] = bottom[p, h, w]
                rand_idx[p, ph, pw] = h * width + w
                return


def sto_pool_test_at_py(bottom, top, window_sum, p, ph, pw, kernel_h, kernel_w, stride_h,
                        stride_w):
    """top = sum(x^2) / (FLT_MIN + sum(x)) over the window (activation-weighted average)."""
    height = bottom.shape[1]
    width = bottom.shape[2]
    hstart = ph * stride_h
    wstart = pw * stride_w
    hend = min(hstart + kernel_h, height)
    wend = min(wstart + kernel_w, width)
    cumsum = np.float32(FLT_MIN)
    cumvalues = np.float32(0.0)
    for h in range(hstart, hend):
        for w in range(wstart, wend):
            cumsum += bottom[p, h, w]
            cumvalues += bottom[p, h, w] * bottom[p, h, w]
    top[p, ph, pw] = cumvalues / cumsum
    window_sum[p, ph, pw] = cumsum


def sto_pool_grad_at_py(top_diff, rand_idx, bottom_diff, p, h, w, ph0, ph1, pw0, pw1):
    """bottom_diff[p, h, w] = sum of top diffs of the windows [ph0, ph1) x [pw0, pw1) holding
    (h, w) that sampled it."""
    width = bottom_diff.shape[2]
    index = h * width + w
    gradient = np.float32(0.0)
    for ph in range(ph0, ph1):
        for pw in range(pw0, pw1):
            if rand_idx[p, ph, pw] == index:
                gradient += top_diff[p, ph, pw]
    bottom_diff[p, h, w] = gradient


def sto_pool_test_grad_at_py(bottom, top, window_sum, top_diff, bottom_diff, p, h, w, ph0,
                             ph1, pw0, pw1):
    """Exact gradient of the TEST output y = S2 / S1: dy/dx = (2 x - y) / S1, summed over the
    windows [ph0, ph1) x [pw0, pw1) holding (h, w)."""
    x2 = np.float32(2.0) * bottom[p, h, w]
    gradient = np.float32(0.0)
    for ph in range(ph0, ph1):
        for pw in range(pw0, pw1):
            gradient += top_diff[p, ph, pw] * (x2 - top[p, ph, pw]) / window_sum[p, ph, pw]
    bottom_diff[p, h, w] = gradient


_sto_pool_train_at = njit(cache=True, inline="always")(sto_pool_train_at_py)
_sto_pool_test_at = njit(cache=True, inline="always")(sto_pool_test_at_py)
_sto_pool_grad_at = njit(cache=True, inline="always")(sto_pool_grad_at_py)
_sto_pool_test_grad_at = njit(cache=True, inline="always")(sto_pool_test_grad_at_py)


@njit(cache=True, parallel=True, nogil=True)
def sto_pool_forward_train(bottom, uniform, top, rand_idx, kernel_h, kernel_w, stride_h,
                           stride_w):
    """Stochastic pooling, TRAIN: sampled activations into ``top``, their indices into
    ``rand_idx`` (int32), from ``uniform`` draws in (0, 1], all of shape (P, PH, PW)."""
    for p in prange(top.shape[0]):
        for ph in range(top.shape[1]):
            for pw in range(top.shape[2]):
                _sto_pool_train_at(bottom, uniform, top, rand_idx, p, ph, pw, kernel_h,
                                   kernel_w, stride_h, stride_w)


@njit(cache=True, parallel=True, nogil=True)
def sto_pool_forward_test(bottom, top, window_sum, kernel_h, kernel_w, stride_h, stride_w):
    """Stochastic pooling, TEST: the activation-weighted average; ``window_sum`` keeps the
    denominators for the backward pass."""
    for p in prange(top.shape[0]):
        for ph in range(top.shape[1]):
            for pw in range(top.shape[2]):
                _sto_pool_test_at(bottom, top, window_sum, p, ph, pw, kernel_h, kernel_w,
                                  stride_h, stride_w)


@njit(cache=True, parallel=True, nogil=True)
def sto_pool_backward(top_diff, rand_idx, bottom_diff, kernel_h, kernel_w, stride_h,
                      stride_w):
    """Route each top diff to its sampled position; writes every element of ``bottom_diff``."""
    rows, cols = _window_ranges(bottom_diff, top_diff, kernel_h, kernel_w, stride_h, stride_w,
                                0, 0)
    for p in prange(bottom_diff.shape[0]):
        for h in range(bottom_diff.shape[1]):
            for w in range(bottom_diff.shape[2]):
                _sto_pool_grad_at(top_diff, rand_idx, bottom_diff, p, h, w, rows[h, 0],
                                  rows[h, 1], cols[w, 0], cols[w, 1])


@njit(cache=True, parallel=True, nogil=True)
def sto_pool_backward_test(bottom, top, window_sum, top_diff, bottom_diff, kernel_h, kernel_w,
                           stride_h, stride_w):
    """Gradient of the TEST-phase weighted average (Caffe has no TEST backward)."""
    rows, cols = _window_ranges(bottom_diff, top_diff, kernel_h, kernel_w, stride_h, stride_w,
                                0, 0)
    for p in prange(bottom_diff.shape[0]):
        for h in range(bottom_diff.shape[1]):
            for w in range(bottom_diff.shape[2]):
                _sto_pool_test_grad_at(bottom, top, window_sum, top_diff, bottom_diff, p, h, w,
                                       rows[h, 0], rows[h, 1], cols[w, 0], cols[w, 1])
