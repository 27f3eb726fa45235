"""The phase planes and grids of the direct convolution kernels (forward.py, backward.py).

Every tap becomes ONE contiguous loop over a whole plane. A job copies its input planes,
zero-padded, into "phase planes": for strides (s_h, s_w) the padded plane splits into s_h s_w
planes of qh x qw (qh = ceil(padded height / s_h)), phase (r_h, r_w) holding the padded pixels
(i s_h + r_h, j s_w + r_w). Output (oh, ow) then reads, for tap (ki, kj), element
(oh + ki d_h // s_h, ow + kj d_w // s_w) of phase (ki d_h % s_h, kj d_w % s_w): at flat
position ``j = oh qw + ow`` of an output grid qw wide, tap t reads ``phases[base[t] + j]``. The
grid's columns out_w..qw-1 are scratch (computed, never stored; zero where they are read).
The kernels run over the L = (out_h - 1) qw + out_w grid positions in chunks of ``CHUNK``
positions, all taps per chunk, to stay in L1.
"""
import numpy as np
from numba import njit, uintp

from pycaffe_cli.layers.kernels.geometry import conv_out_size

CHUNK = 2048  # grid positions per pass: a chunk of the grid stays in L1 while the taps run


@njit(cache=True, nogil=True)
def phase_layout(height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h, stride_w,
                 dilation_h, dilation_w):
    """(out_h, out_w, qh, qw, L, base): the phase planes' extents, the grid length and each
    tap's offset in a channel's phase planes (see the module doc)."""
    out_h = conv_out_size(height, kernel_h, pad_h, stride_h, dilation_h)
    out_w = conv_out_size(width, kernel_w, pad_w, stride_w, dilation_w)
    qh = (height + 2 * pad_h + stride_h - 1) // stride_h
    qw = (width + 2 * pad_w + stride_w - 1) // stride_w
    base = np.empty(kernel_h * kernel_w, np.int64)
    for ki in range(kernel_h):
        for kj in range(kernel_w):
            rh, a = (ki * dilation_h) % stride_h, (ki * dilation_h) // stride_h
            rw, b = (kj * dilation_w) % stride_w, (kj * dilation_w) // stride_w
            base[ki * kernel_w + kj] = ((rh * stride_w + rw) * qh + a) * qw + b
    return out_h, out_w, qh, qw, (out_h - 1) * qw + out_w, base


@njit(cache=True, nogil=True)
def phase_places(height, width, pad_h, pad_w, stride_h, stride_w, qh, qw):
    """Where ``phase_rows`` moves each image row: the offset of row h in the phase planes
    (``rows[h]``), and per column phase rw the offset of its first element in a row
    (``cols[rw]``), that element's image column (``firsts[rw]``) and how many it holds
    (``counts[rw]``). Computed once per call: the divisions by the strides cost more than
    moving a small plane."""
    rows = np.empty(height, np.int64)
    for h in range(height):
        hp = h + pad_h
        rows[h] = ((hp % stride_h) * stride_w * qh + hp // stride_h) * qw
    cols, firsts = np.empty(stride_w, np.int64), np.empty(stride_w, np.int64)
    counts = np.empty(stride_w, np.int64)
    for rw in range(stride_w):
        w0 = (rw - pad_w) % stride_w  # the first column of phase rw
        cols[rw] = rw * qh * qw + (w0 + pad_w) // stride_w
        firsts[rw] = w0
        counts[rw] = (width - w0 + stride_w - 1) // stride_w
    return rows, cols, firsts, counts


@njit(cache=True, inline="always")
def phase_rows(phases, p0, image, i0, width, stride_w, places, to_phases):
    """Copy an image plane (at image[i0:]) into its phase planes (at phases[p0:]), or back
    out of them (``to_phases`` false), as ``places`` (``phase_places``) says. The padding
    is left as it is."""
    rows, cols, firsts, counts = places
    for h in range(rows.shape[0]):
        row = p0 + rows[h]
        for rw in range(stride_w):
            dst = row + cols[rw]
            src = i0 + h * width + firsts[rw]
            if to_phases:
                for k in range(counts[rw]):
                    phases[uintp(dst + k)] = image[uintp(src + k * stride_w)]
            else:
                for k in range(counts[rw]):
                    image[uintp(src + k * stride_w)] = phases[uintp(dst + k)]
