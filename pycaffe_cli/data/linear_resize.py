"""OpenCV's ``cv::resize(..., INTER_LINEAR)`` for 8-bit images, to the bit.

Source position ``(d + 0.5) * scale - 0.5`` per destination index, 11-bit fixed-point
weights, a horizontal pass per source row (int32 sums of two taps) and a vertical pass with
the rounding of OpenCV's SIMD code (16-bit products, their high halves kept). Pillow's own
bilinear filter antialiases when shrinking and so disagrees with OpenCV.
"""
import functools

import numpy as np
from numba import njit

from pycaffe_cli.blob import read_only

_COEF_SCALE = 2048  # OpenCV's INTER_RESIZE_COEF_SCALE (11 fractional bits)


def axis_table(src_size, dst_size, clamp):
    """Source index and the two fixed-point weights per destination index (OpenCV's
    xofs/ialpha or yofs/ibeta; only the horizontal table is clamped at the borders)."""
    scale = 1.0 / (dst_size / src_size)
    pos = ((np.arange(dst_size) + 0.5) * scale - 0.5).astype(np.float32)
    index = np.floor(pos).astype(np.int64)
    frac = (pos - index.astype(np.float32)).astype(np.float32)
    if clamp:
        low = index < 0
        frac[low], index[low] = 0, 0
        high = index >= src_size - 1
        frac[high], index[high] = 0, src_size - 1
    coef = np.float32(_COEF_SCALE)
    weight0 = np.rint((np.float32(1) - frac) * coef).astype(np.int64)
    weight1 = np.rint(frac * coef).astype(np.int64)
    return index, weight0, weight1


@functools.lru_cache(maxsize=1024)
def _tables(src_h, src_w, height, width):
    """The kernels' operands: column and row taps with their weights, read-only, kept for
    the sizes seen last (a data layer resizes images of a few hundred sizes to one, and
    building the tables is numpy work that holds the GIL the decode threads share). Unsigned
    indices: numba then adds no wrap-around test for negative ones to the gathers, which
    costs a third of the kernel's time."""
    xofs, alpha0, alpha1 = axis_table(src_w, width, clamp=True)
    yofs, beta0, beta1 = axis_table(src_h, height, clamp=False)
    left = xofs.astype(np.uintp)
    right = np.minimum(xofs + 1, src_w - 1).astype(np.uintp)
    top = np.clip(yofs, 0, src_h - 1).astype(np.uintp)
    bottom = np.clip(yofs + 1, 0, src_h - 1).astype(np.uintp)
    tables = (left, right, alpha0, alpha1, top, bottom, beta0, beta1)
    for table in tables:
        table.flags.writeable = False
    return tables


def resize_linear(pixels, height, width):
    """(C, H, W) uint8 pixels resized to (C, height, width) (the input itself when its size
    is already that)."""
    channels, src_h, src_w = pixels.shape
    if (src_h, src_w) == (height, width):
        return pixels
    out = np.empty((channels, height, width), np.uint8)
    _resize_planes(read_only(np.ascontiguousarray(pixels)), *_tables(src_h, src_w, height, width),
                   out)
    return out


@njit(cache=True, nogil=True)
def _resize_planes(src, left, right, alpha0, alpha1, top, bottom, beta0, beta1, out):
    """OpenCV's two passes over each plane: each source row's horizontal pass once, then
    the vertical pass over two of them."""
    width = out.shape[2]
    rows = np.empty((2, width), np.int32)
    for c in range(out.shape[0]):
        held = np.full(2, -1, np.int64)
        for y in range(out.shape[1]):
            first, second, fill_first, fill_second = _row_buffers(held, top[y], bottom[y])
            if fill_first:
                _horizontal_plane(src[c, top[y]], left, right, alpha0, alpha1, rows[first])
            if fill_second:
                _horizontal_plane(src[c, bottom[y]], left, right, alpha0, alpha1,
                                  rows[second])
            _vertical_row(rows[first], rows[second], beta0[y], beta1[y], out[c, y])


@njit(cache=True, nogil=True, inline="always")
def _row_buffers(held, top, bottom):
    """Which of the two row buffers hold the horizontal passes of source rows ``top`` and
    ``bottom``, and which of them must be computed first: each source row's pass is
    computed once while consecutive output rows share it, as OpenCV's ring of row buffers
    does. ``held`` (the row each buffer holds, -1 for none) is updated."""
    first = 0 if held[0] == top else 1 if held[1] == top else -1
    second = 0 if held[0] == bottom else 1 if held[1] == bottom else -1
    fill_first = first < 0
    if fill_first:
        first = 1 if second == 0 else 0
        held[first] = top
        if bottom == top:
            second = first
    fill_second = second < 0
    if fill_second:
        second = 1 - first
        held[second] = bottom
    return first, second, fill_first, fill_second


@njit(cache=True, nogil=True, inline="always")
def _horizontal_plane(source, left, right, alpha0, alpha1, buffer):
    for x in range(buffer.shape[0]):
        buffer[x] = source[left[x]] * alpha0[x] + source[right[x]] * alpha1[x]


@njit(cache=True, nogil=True, inline="always")
def _vertical_row(upper, lower, weight0, weight1, out_row):
    # OpenCV's vectorised vertical pass: 16-bit products, keep the high halves.
    for x in range(out_row.shape[0]):
        value = ((((upper[x] >> 4) * weight0) >> 16) + (((lower[x] >> 4) * weight1) >> 16)
                 + 2) >> 2
        out_row[x] = min(max(value, 0), 255)
