"""Window geometry shared by the pooling kernels (CPU; the CUDA twin compiles the plain
Python bodies too): the input rows and columns a window covers, and the outputs whose
windows cover an input pixel.

The window of output (ph, pw) is rows [ph * stride_h - pad_h, ... + kernel_h) and likewise for
columns, clipped to the image. AVE divides by the window clipped to the PADDED image instead:
``pool_size = (min(hstart + kernel_h, height + pad_h) - hstart) * (same for w)``.
"""
import numpy as np
from numba import njit

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
def window_ranges(bottom, top, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w):
    """``window_range`` for every row and every column, computed once per call (the CPU
    drivers look them up instead of dividing per pixel)."""
    rows = np.empty((bottom.shape[1], 2), np.int64)
    cols = np.empty((bottom.shape[2], 2), np.int64)
    for h in range(bottom.shape[1]):
        rows[h, 0], rows[h, 1] = window_range(h + pad_h, kernel_h, stride_h, top.shape[1])
    for w in range(bottom.shape[2]):
        cols[w, 0], cols[w, 1] = window_range(w + pad_w, kernel_w, stride_w, top.shape[2])
    return rows, cols


# --- which pixels a window covers: computed once per call -----------------------------------
@njit(cache=True, nogil=True)
def window_bounds(pooled, kernel, stride, pad, size):
    """Row o: [start, end) of window o along one axis, clipped to the image, and the extent
    Caffe's AVE divides by (the window clipped to the padded image)."""
    bounds = np.empty((pooled, 3), np.int64)
    for o in range(pooled):
        start = o * stride - pad
        bounds[o, 0] = max(start, 0)
        bounds[o, 1] = min(start + kernel, size)
        bounds[o, 2] = min(start + kernel, size + pad) - start
    return bounds


def inner_outputs_py(size, pooled, kernel, stride, pad):
    """[lo, hi): the outputs along one axis whose window lies inside the image."""
    lo = min((pad + stride - 1) // stride, pooled)
    hi = max(min((size - kernel + pad) // stride + 1, pooled), lo)
    return lo, hi


inner_range = njit(cache=True)(inner_outputs_py)
