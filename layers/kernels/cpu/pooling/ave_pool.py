"""AVE pooling kernels (Caffe's PoolingLayer AVE) over planes of shape (N*C, H, W) (CPU, numba).

Forward: each window's sum divided by its size clipped to the padded image (window.py), one
plane per ``prange`` job; a window that is the whole plane (global pooling) sums eight planes
side by side (``_global_average``). Sums run in float32 in Caffe's order (row-major over a
window; across windows, row-major over the windows), so the numbers are Caffe CPU's. LRN's
WITHIN_CHANNEL kernels (kernels/cpu/lrn.py) use these too.

Backward SCATTERS each window's share within the plane, in row-major window order, and one
job owns a whole plane, so no two threads write the same element (the GPU twin gathers).
"""
import numpy as np
from numba import njit, prange, uintp

from pycaffe_cli.layers.kernels.cpu.pooling.window import window_bounds


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
    the adder busy. The eight accumulators are written out: in an array they ran slower
    (docs/kernel-choices.md, "Global average pooling")."""
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
    rows = window_bounds(top.shape[1], kernel_h, stride_h, pad_h, bottom.shape[1])
    cols = window_bounds(top.shape[2], kernel_w, stride_w, pad_w, bottom.shape[2])
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
    rows = window_bounds(top_diff.shape[1], kernel_h, stride_h, pad_h, height)
    cols = window_bounds(top_diff.shape[2], kernel_w, stride_w, pad_w, width)
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
