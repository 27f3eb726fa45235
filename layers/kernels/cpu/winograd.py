"""Winograd F(4x4, 3x3) convolution for the inference plan (CPU, numba + BLAS).

A 3x3 convolution with stride 1 and no dilation computes each 4x4 block ("tile") of an
output channel from a 6x6 patch of every input channel. Winograd's minimal filtering
(Lavin & Gray, 2016) writes that as 36 products instead of 144::

    U[xi, m, c] = (G  g[m, c]  G^T)[xi]          weights, once per weight change
    V[xi, c, t] = (B^T d[c, t] B)[xi]             d: the 6x6 input patch of tile t
    M[xi]       = U[xi] @ V[xi]                   36 GEMMs (M x C) @ (C x tiles)
    y[m, t]     = A^T M[:, m, t] A  (+ bias, ReLU)  the 4x4 output tile

so the GEMMs do 4x fewer multiplications than im2col's. The 36 products are small: they run
one per thread (pycaffe_cli/blas.py). The matrices come from polynomial
interpolation at the points 0, 1, -1, 1/2, -2 (and infinity) instead of the usual 0, +-1,
+-2: on unit-scale data this keeps the float32 result within ~2.5e-6 of the exact
convolution (relative to the largest output), against ~1e-5 for +-2 and ~6e-7 for im2col +
GEMM (Barabasz et al., "Error analysis and improving the accuracy of Winograd convolution",
2020, measured here again).

Tiles are numbered across the whole batch (image, tile row, tile column), so small images
share GEMMs. The caller runs blocks of ``count`` tiles from ``first``, as large as its
scratch limit allows (V (36, C, count), M (36, M_out, count)): smaller blocks, kept in cache,
measured no faster, and each block costs 36 more GEMM calls. In both transforms the tile is the
innermost, contiguous axis, so the 6-point transforms vectorise over tiles; each channel
gathers its patches into (or scatters its tiles from) a scratch array first.
"""
import numpy as np
from numba import float32, njit, prange, uintp

from pycaffe_cli.blas import matmul_spread
from pycaffe_cli.layers.kernels.cpu.layout import rectify as _rectify
from pycaffe_cli.layers.kernels.geometry import conv_out_size

TILE = 4  # output tile side
PATCH = 6  # input patch side: TILE + 3 - 1
POINTS = PATCH * PATCH

# Interpolation points 0, 1, -1, 1/2, -2 and infinity (last row/column of each matrix).
_G = np.array([[1, 0, 0],
               [1 / 3, 1 / 3, 1 / 3],
               [-1 / 3, 1 / 3, -1 / 3],
               [-16 / 15, -8 / 15, -4 / 15],
               [1 / 15, -2 / 15, 4 / 15],
               [0, 0, 1]], np.float64)


def transform_weights(weights):
    """U (36, M, C) float32 from 3x3 ``weights`` (M, C, 3, 3), computed in float64 and
    rounded once."""
    u = np.einsum("ik,mckl,jl->ijmc", _G, weights.astype(np.float64), _G)
    return np.ascontiguousarray(u.reshape(POINTS, *weights.shape[:2]), dtype=np.float32)


@njit(cache=True, inline="always")
def _six(src, at, step):
    """src[at], src[at + step], ..., src[at + 5 step]."""
    return (src[uintp(at)], src[uintp(at + step)], src[uintp(at + 2 * step)],
            src[uintp(at + 3 * step)], src[uintp(at + 4 * step)], src[uintp(at + 5 * step)])


@njit(cache=True, inline="always")
def _input_rows(src, src_at, src_step, dst, dst_at, dst_step, count):
    """B^T applied to six streams of ``count`` values: stream k of ``src`` starts at
    ``src_at + k src_step``; stream k of the result goes to ``dst_at + k dst_step``."""
    for t in range(count):
        d0, d1, d2, d3, d4, d5 = _six(src, src_at + t, src_step)
        dst[uintp(dst_at + t)] = d0 - float32(1.5) * d1 - float32(2) * d2 + float32(1.5) * d3 \
            + d4
        dst[uintp(dst_at + dst_step + t)] = -d1 + float32(0.5) * d2 + float32(2.5) * d3 + d4
        dst[uintp(dst_at + 2 * dst_step + t)] = d1 - float32(2.5) * d2 + float32(0.5) * d3 + d4
        dst[uintp(dst_at + 3 * dst_step + t)] = -float32(2) * d1 - d2 + float32(2) * d3 + d4
        dst[uintp(dst_at + 4 * dst_step + t)] = float32(0.5) * d1 - d2 - float32(0.5) * d3 + d4
        dst[uintp(dst_at + 5 * dst_step + t)] = d1 - float32(1.5) * d2 - float32(2) * d3 \
            + float32(1.5) * d4 + d5


@njit(cache=True, inline="always")
def _output_rows(src, src_at, src_step, dst, dst_at, dst_step, count):
    """A^T applied to six streams of ``count`` values (as ``_input_rows``), four results."""
    for t in range(count):
        m0, m1, m2, m3, m4, m5 = _six(src, src_at + t, src_step)
        plus, minus = m1 + m2, m1 - m2
        dst[uintp(dst_at + t)] = m0 + plus + m3 + m4
        dst[uintp(dst_at + dst_step + t)] = minus + float32(0.5) * m3 - float32(2) * m4
        dst[uintp(dst_at + 2 * dst_step + t)] = plus + float32(0.25) * m3 + float32(4) * m4
        dst[uintp(dst_at + 3 * dst_step + t)] = minus + float32(0.125) * m3 - float32(8) * m4 \
            + m5


@njit(cache=True, inline="always")
def _gather_patches(im, image_size, plane_at, height, width, pad_h, pad_w, tiles_h, tiles_w,
                    first, count, patches):
    """patches[(j, i), t] = pixel (i, j) of tile t's 6x6 patch (0 outside the image), column
    by column, for the ``count`` tiles from ``first``, in the plane at ``plane_at`` of each
    image (images ``image_size`` apart in the flat ``im``)."""
    per_image = tiles_h * tiles_w
    for t in range(count):
        tile = first + t
        row0 = (tile % per_image) // tiles_w * TILE - pad_h
        col0 = tile % tiles_w * TILE - pad_w
        base = tile // per_image * image_size + plane_at
        inside = row0 >= 0 and col0 >= 0 and row0 + PATCH <= height and col0 + PATCH <= width
        for i in range(PATCH):
            r = row0 + i
            for j in range(PATCH):
                q = col0 + j
                if inside or (0 <= r < height and 0 <= q < width):
                    value = im[uintp(base + r * width + q)]
                else:
                    value = float32(0)
                patches[uintp((j * PATCH + i) * count + t)] = value


@njit(cache=True, parallel=True)
def input_transform(im, channels, height, width, pad_h, pad_w, tiles_h, tiles_w, first, count,
                    v):
    """V (36, channels, count) of the ``count`` tiles from ``first``: ``im`` holds the batch
    (num, channels, height, width), flat; ``v`` is flat."""
    plane = height * width
    for c in prange(channels):
        patches = np.empty(POINTS * count, np.float32)
        columns = np.empty(POINTS * count, np.float32)
        _gather_patches(im, channels * plane, c * plane, height, width, pad_h, pad_w, tiles_h,
                        tiles_w, first, count, patches)
        for j in range(PATCH):  # B^T d, column j: columns[(j, i'), t]
            _input_rows(patches, j * PATCH * count, count, columns, j * PATCH * count, count,
                        count)
        for i in range(PATCH):  # (B^T d) B, row i': V[(i', j'), c, t]
            _input_rows(columns, i * count, PATCH * count, v, (i * PATCH * channels + c) * count,
                        channels * count, count)


@njit(cache=True, parallel=True)
def output_transform(m, out_channels, out_h, out_w, tiles_h, tiles_w, first, count, bias,
                     has_bias, slope, has_relu, out):
    """out (num, out_channels, out_h, out_w) tiles [first, first + count) from M (36,
    out_channels, count), flat, (+ bias[o]) (then ReLU with negative slope ``slope``)."""
    per_image = tiles_h * tiles_w
    plane = out_h * out_w
    for o in prange(out_channels):
        rows = np.empty(TILE * PATCH * count, np.float32)
        tiles = np.empty(TILE * TILE * count, np.float32)
        for j in range(PATCH):  # A^T M, column j: rows[(a, j), t]
            _output_rows(m, (j * out_channels + o) * count, PATCH * out_channels * count, rows,
                         j * count, PATCH * count, count)
        for a in range(TILE):  # (A^T M) A, row a: tiles[(a, b), t]
            _output_rows(rows, a * PATCH * count, count, tiles, a * TILE * count, count, count)
        b = bias[o] if has_bias else float32(0)
        for t in range(count):
            tile = first + t
            row0 = (tile % per_image) // tiles_w * TILE
            col0 = tile % tiles_w * TILE
            base = (tile // per_image * out_channels + o) * plane
            for a in range(min(TILE, out_h - row0)):
                for k in range(min(TILE, out_w - col0)):
                    value = tiles[uintp((a * TILE + k) * count + t)] + b
                    if has_relu:
                        value = _rectify(value, slope)
                    out[uintp(base + (row0 + a) * out_w + col0 + k)] = value


def tile_counts(out_h, out_w):
    """(tiles down, tiles across) covering an out_h x out_w output."""
    return -(-out_h // TILE), -(-out_w // TILE)


def forward(im, num, channels, height, width, pad_h, pad_w, u, out_channels, bias, relu_slope,
            out, v, m, block):
    """out (num, out_channels, out_h, out_w) = the 3x3 convolution (stride 1) of the flat
    batch ``im`` by the weights whose transform is ``u`` (``transform_weights``), + bias
    (None: none), then ReLU with negative slope ``relu_slope`` (None: none); blocks of at
    most ``block`` tiles through the flat scratch arrays ``v`` (36 channels block) and ``m``
    (36 out_channels block)."""
    out_h, out_w = conv_out_size(height, 3, pad_h, 1, 1), conv_out_size(width, 3, pad_w, 1, 1)
    tiles_h, tiles_w = tile_counts(out_h, out_w)
    total = num * tiles_h * tiles_w
    has_bias, has_relu = bias is not None, relu_slope is not None
    bias = bias if has_bias else np.zeros(1, np.float32)
    slope = np.float32(relu_slope if has_relu else 0)
    for first in range(0, total, block):
        count = min(block, total - first)
        v_block = v[:POINTS * channels * count]
        m_block = m[:POINTS * out_channels * count]
        input_transform(im, channels, height, width, pad_h, pad_w, tiles_h, tiles_w, first,
                        count, v_block)
        matmul_spread(u, v_block.reshape(POINTS, channels, count),
                      m_block.reshape(POINTS, out_channels, count))
        output_transform(m_block, out_channels, out_h, out_w, tiles_h, tiles_w, first, count,
                         bias, has_bias, slope, has_relu, out)
