"""Pooling kernels (Caffe's PoolingLayer maths) over planes of shape (N*C, H, W).

The work for one output element (forward) or one input element (backward) is a plain Python
function ``*_at_py``; the CPU drivers below run it under a ``prange`` over the N*C planes
(inlined at numba-IR level with ``inline="always"``: as plain calls they run at half the
speed), and a ``numba.cuda`` grid-stride loop can compile the same bodies. Every backward pass
GATHERS: an input pixel visits the output windows that can contain it (``window_range``), so no
two threads ever write the same element and the GPU needs no atomics.

The window of output (ph, pw) is rows [ph * stride_h - pad_h, ... + kernel_h) and likewise for
columns, clipped to the image. AVE divides by the window clipped to the PADDED image instead:
``pool_size = (min(hstart + kernel_h, height + pad_h) - hstart) * (same for w)``. Sums run in
float32 in Caffe's order (row-major over a window; in gathers, row-major over the windows, the
order in which Caffe's CPU scatter adds them), so the numbers are Caffe CPU's. Masks hold the
argmax as the in-plane index ``h * width + w``: int32 in the layer's own buffer, float32 when
the mask is the layer's second top.
"""
import numpy as np
from numba import njit, prange

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


@njit(cache=True)
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


# --- MAX ------------------------------------------------------------------------------------
def max_pool_at_py(bottom, top, mask, p, ph, pw, kernel_h, kernel_w, stride_h, stride_w,
                   pad_h, pad_w):
    """top[p, ph, pw] = max over the window (first maximum wins); mask = its flat index."""
    height, width = bottom.shape[1], bottom.shape[2]
    hstart = ph * stride_h - pad_h
    wstart = pw * stride_w - pad_w
    hend = min(hstart + kernel_h, height)
    wend = min(wstart + kernel_w, width)
    hstart = max(hstart, 0)
    wstart = max(wstart, 0)
    maxval = -FLT_MAX
    maxidx = -1
    for h in range(hstart, hend):
        for w in range(wstart, wend):
            if bottom[p, h, w] > maxval:
                maxval = bottom[p, h, w]
                maxidx = h * width + w
    top[p, ph, pw] = maxval
    mask[p, ph, pw] = maxidx


def max_pool_grad_at_py(top_diff, mask, bottom_diff, p, h, w, ph0, ph1, pw0, pw1):
    """bottom_diff[p, h, w] = sum of top diffs of the windows whose argmax is (h, w); the
    windows holding (h, w) are [ph0, ph1) x [pw0, pw1) (from ``window_range``)."""
    width = bottom_diff.shape[2]
    index = h * width + w
    gradient = np.float32(0.0)
    for ph in range(ph0, ph1):
        for pw in range(pw0, pw1):
            if mask[p, ph, pw] == index:
                gradient += top_diff[p, ph, pw]
    bottom_diff[p, h, w] = gradient


_max_pool_at = njit(cache=True, inline="always")(max_pool_at_py)
_max_pool_grad_at = njit(cache=True, inline="always")(max_pool_grad_at_py)


@njit(cache=True, parallel=True)
def max_pool_forward(bottom, top, mask, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w):
    """Max pooling of ``bottom`` (P, H, W) into ``top`` and ``mask`` (P, PH, PW)."""
    for p in prange(top.shape[0]):
        for ph in range(top.shape[1]):
            for pw in range(top.shape[2]):
                _max_pool_at(bottom, top, mask, p, ph, pw, kernel_h, kernel_w, stride_h,
                             stride_w, pad_h, pad_w)


@njit(cache=True, parallel=True)
def max_pool_backward(top_diff, mask, bottom_diff, kernel_h, kernel_w, stride_h, stride_w,
                      pad_h, pad_w):
    """Route each top diff to its window's argmax; writes every element of ``bottom_diff``."""
    rows, cols = _window_ranges(bottom_diff, top_diff, kernel_h, kernel_w, stride_h, stride_w,
                                pad_h, pad_w)
    for p in prange(bottom_diff.shape[0]):
        for h in range(bottom_diff.shape[1]):
            for w in range(bottom_diff.shape[2]):
                _max_pool_grad_at(top_diff, mask, bottom_diff, p, h, w, rows[h, 0], rows[h, 1],
                                  cols[w, 0], cols[w, 1])


# --- AVE ------------------------------------------------------------------------------------
def ave_pool_size_py(ph, pw, height, width, kernel_h, kernel_w, stride_h, stride_w, pad_h,
                     pad_w):
    """Caffe's divisor: the window clipped to the padded image (padding counts as zeros)."""
    hstart = ph * stride_h - pad_h
    wstart = pw * stride_w - pad_w
    hend = min(hstart + kernel_h, height + pad_h)
    wend = min(wstart + kernel_w, width + pad_w)
    return (hend - hstart) * (wend - wstart)


ave_pool_size = njit(cache=True)(ave_pool_size_py)


def ave_pool_at_py(bottom, top, p, ph, pw, kernel_h, kernel_w, stride_h, stride_w, pad_h,
                   pad_w):
    """top[p, ph, pw] = sum of the window inside the image / pool size."""
    height, width = bottom.shape[1], bottom.shape[2]
    pool_size = ave_pool_size(ph, pw, height, width, kernel_h, kernel_w, stride_h, stride_w,
                              pad_h, pad_w)
    hstart = max(ph * stride_h - pad_h, 0)
    wstart = max(pw * stride_w - pad_w, 0)
    hend = min(ph * stride_h - pad_h + kernel_h, height)
    wend = min(pw * stride_w - pad_w + kernel_w, width)
    total = np.float32(0.0)
    for h in range(hstart, hend):
        for w in range(wstart, wend):
            total += bottom[p, h, w]
    top[p, ph, pw] = total / np.float32(pool_size)


def ave_pool_grad_at_py(top_diff, bottom_diff, p, h, w, ph0, ph1, pw0, pw1, kernel_h,
                        kernel_w, stride_h, stride_w, pad_h, pad_w):
    """bottom_diff[p, h, w] = sum over the windows [ph0, ph1) x [pw0, pw1) holding (h, w) of
    top diff / pool size."""
    height, width = bottom_diff.shape[1], bottom_diff.shape[2]
    gradient = np.float32(0.0)
    for ph in range(ph0, ph1):
        for pw in range(pw0, pw1):
            pool_size = ave_pool_size(ph, pw, height, width, kernel_h, kernel_w, stride_h,
                                      stride_w, pad_h, pad_w)
            gradient += top_diff[p, ph, pw] / np.float32(pool_size)
    bottom_diff[p, h, w] = gradient


_ave_pool_at = njit(cache=True, inline="always")(ave_pool_at_py)
_ave_pool_grad_at = njit(cache=True, inline="always")(ave_pool_grad_at_py)


@njit(cache=True, parallel=True)
def ave_pool_forward(bottom, top, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w):
    """Average pooling of ``bottom`` (P, H, W) into ``top`` (P, PH, PW)."""
    for p in prange(top.shape[0]):
        for ph in range(top.shape[1]):
            for pw in range(top.shape[2]):
                _ave_pool_at(bottom, top, p, ph, pw, kernel_h, kernel_w, stride_h, stride_w,
                             pad_h, pad_w)


@njit(cache=True, parallel=True)
def ave_pool_backward(top_diff, bottom_diff, kernel_h, kernel_w, stride_h, stride_w, pad_h,
                      pad_w):
    """Spread each top diff evenly over its window; writes every element of ``bottom_diff``."""
    rows, cols = _window_ranges(bottom_diff, top_diff, kernel_h, kernel_w, stride_h, stride_w,
                                pad_h, pad_w)
    for p in prange(bottom_diff.shape[0]):
        for h in range(bottom_diff.shape[1]):
            for w in range(bottom_diff.shape[2]):
                _ave_pool_grad_at(top_diff, bottom_diff, p, h, w, rows[h, 0], rows[h, 1],
                                  cols[w, 0], cols[w, 1], kernel_h, kernel_w, stride_h,
                                  stride_w, pad_h, pad_w)


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


@njit(cache=True, parallel=True)
def sto_pool_forward_train(bottom, uniform, top, rand_idx, kernel_h, kernel_w, stride_h,
                           stride_w):
    """Stochastic pooling, TRAIN: sampled activations into ``top``, their indices into
    ``rand_idx`` (int32), from ``uniform`` draws in (0, 1], all of shape (P, PH, PW)."""
    for p in prange(top.shape[0]):
        for ph in range(top.shape[1]):
            for pw in range(top.shape[2]):
                _sto_pool_train_at(bottom, uniform, top, rand_idx, p, ph, pw, kernel_h,
                                   kernel_w, stride_h, stride_w)


@njit(cache=True, parallel=True)
def sto_pool_forward_test(bottom, top, window_sum, kernel_h, kernel_w, stride_h, stride_w):
    """Stochastic pooling, TEST: the activation-weighted average; ``window_sum`` keeps the
    denominators for the backward pass."""
    for p in prange(top.shape[0]):
        for ph in range(top.shape[1]):
            for pw in range(top.shape[2]):
                _sto_pool_test_at(bottom, top, window_sum, p, ph, pw, kernel_h, kernel_w,
                                  stride_h, stride_w)


@njit(cache=True, parallel=True)
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


@njit(cache=True, parallel=True)
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
