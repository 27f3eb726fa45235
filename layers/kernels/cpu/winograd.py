"""Winograd F(4x4, 3x3) convolution for the inference plan (CPU, numba + BLAS).

A 3x3 convolution with stride 1 and no dilation computes each 4x4 block ("tile") of an
output channel from a 6x6 patch of every input channel. Winograd's minimal filtering
(Lavin & Gray, 2016) writes that as 36 products instead of 144::

    U[xi, m, c] = (G  g[m, c]  G^T)[xi]          weights, once per weight change
    V[xi, c, t] = (B^T d[c, t] B)[xi]             d: the 6x6 input patch of tile t
    M[xi]       = U[xi] @ V[xi]                   36 GEMMs (M x C) @ (C x tiles)
    y[m, t]     = A^T M[:, m, t] A  (+ bias, ReLU)  the 4x4 output tile

so the GEMMs do 4x fewer multiplications than im2col's. The 36 products are small: they run
over the threads (pycaffe_cli/blas.py). The matrices come from polynomial
interpolation at the points 0, 1, -1, 1/2, -2 (and infinity) instead of the usual 0, +-1,
+-2, whose larger coefficients round more (Barabasz et al., "Error analysis and improving the
accuracy of Winograd convolution", 2020). How far the float32 result may be from the exact
convolution, and which layers may run this way: winograd_error.py.

Tiles are numbered across the whole batch (image, tile row, tile column), so small images
share GEMMs. The caller runs blocks of ``count`` tiles from ``first``, as large as its
scratch limit allows (V (36, C, count), M (36, M_out, count)): smaller blocks, kept in cache,
measured no faster, and each block costs 36 more GEMM calls. In both transforms the tile is the
innermost, contiguous axis, so the 6-point transforms vectorise over tiles; a few channels at
a time (one where there are many tiles, see BLOCK_PAIRS) gather their patches into (or
scatter their tiles from) a scratch array side by side.
"""
import numpy as np
from numba import float32, njit, prange, uintp

from pycaffe_cli.blas import matmul
from pycaffe_cli.layers.kernels.cpu.layout import NO_BIAS
from pycaffe_cli.layers.kernels.cpu.layout import rectify as _rectify
from pycaffe_cli.layers.kernels.geometry import conv_out_size

TILE = 4  # output tile side
PATCH = 6  # input patch side: TILE + 3 - 1
POINTS = PATCH * PATCH
# Transforms of fewer (channel, tile) pairs than this run on one thread: starting numba's
# threads costs more than such a transform takes on one (docs/kernel-choices.md, "Winograd's
# transforms").
PARALLEL_MIN_JOBS = 6144
# (channel, tile) pairs per block of either transform. With few tiles (a 13x13 output at
# batch 1 has 16) one channel's 36 rows of V or M are 16 values each, far apart, and the
# transform waits on them; several channels side by side read and write longer runs
# (docs/kernel-choices.md, "Winograd's transforms").
BLOCK_PAIRS = 128

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


# The six rows of B^T, each as the sum it computes.
@njit(cache=True, inline="always")
def _b0(d0, d1, d2, d3, d4, d5):
    return d0 - float32(1.5) * d1 - float32(2) * d2 + float32(1.5) * d3 + d4


@njit(cache=True, inline="always")
def _b1(d0, d1, d2, d3, d4, d5):
    return -d1 + float32(0.5) * d2 + float32(2.5) * d3 + d4


@njit(cache=True, inline="always")
def _b2(d0, d1, d2, d3, d4, d5):
    return d1 - float32(2.5) * d2 + float32(0.5) * d3 + d4


@njit(cache=True, inline="always")
def _b3(d0, d1, d2, d3, d4, d5):
    return -float32(2) * d1 - d2 + float32(2) * d3 + d4


@njit(cache=True, inline="always")
def _b4(d0, d1, d2, d3, d4, d5):
    return float32(0.5) * d1 - d2 - float32(0.5) * d3 + d4


@njit(cache=True, inline="always")
def _b5(d0, d1, d2, d3, d4, d5):
    return d1 - float32(1.5) * d2 - float32(2) * d3 + float32(1.5) * d4 + d5


def _one_row(row):
    """A loop applying ``row`` (one of the sums above) to six streams of ``count`` values,
    stream k of ``src`` from ``src_at + k src_step``, into dst[dst_at ...]."""
    @njit(inline="always")
    def apply(src, src_at, src_step, dst, dst_at, count):
        for t in range(count):
            d0, d1, d2, d3, d4, d5 = _six(src, src_at + t, src_step)
            dst[uintp(dst_at + t)] = row(d0, d1, d2, d3, d4, d5)
    return apply


# One loop per result row: a loop writing all six rows at once has 36 pairs of streams that
# may overlap, more than LLVM checks at run time, and where the streams' steps differ
# (the second pass into V) it ran scalar. With one result row each loop vectorises. (A^T's
# four rows stay one loop: it vectorises, and four passes would read the large M array four
# times.) The timings: docs/kernel-choices.md, "Winograd's transforms".
_b_row0, _b_row1, _b_row2, _b_row3, _b_row4, _b_row5 = (
    _one_row(row) for row in (_b0, _b1, _b2, _b3, _b4, _b5))


@njit(cache=True, inline="always")
def _input_columns(src, src_at, dst, dst_at, count):
    """B^T applied to six streams of ``count`` values ``count`` apart from ``src_at``,
    results likewise from ``dst_at``: equal steps, so LLVM can vectorise all six rows in
    one loop."""
    for t in range(count):
        d0, d1, d2, d3, d4, d5 = _six(src, src_at + t, count)
        dst[uintp(dst_at + t)] = _b0(d0, d1, d2, d3, d4, d5)
        dst[uintp(dst_at + count + t)] = _b1(d0, d1, d2, d3, d4, d5)
        dst[uintp(dst_at + 2 * count + t)] = _b2(d0, d1, d2, d3, d4, d5)
        dst[uintp(dst_at + 3 * count + t)] = _b3(d0, d1, d2, d3, d4, d5)
        dst[uintp(dst_at + 4 * count + t)] = _b4(d0, d1, d2, d3, d4, d5)
        dst[uintp(dst_at + 5 * count + t)] = _b5(d0, d1, d2, d3, d4, d5)


@njit(cache=True, inline="always")
def _input_rows(src, src_at, src_step, dst, dst_at, dst_step, count):
    """B^T applied to six streams of ``count`` values: stream k of ``src`` starts at
    ``src_at + k src_step``; stream k of the result goes to ``dst_at + k dst_step``."""
    _b_row0(src, src_at, src_step, dst, dst_at, count)
    _b_row1(src, src_at, src_step, dst, dst_at + dst_step, count)
    _b_row2(src, src_at, src_step, dst, dst_at + 2 * dst_step, count)
    _b_row3(src, src_at, src_step, dst, dst_at + 3 * dst_step, count)
    _b_row4(src, src_at, src_step, dst, dst_at + 4 * dst_step, count)
    _b_row5(src, src_at, src_step, dst, dst_at + 5 * dst_step, count)


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


@njit(cache=True)
def _patch_corners(image_size, height, width, pad_h, pad_w, tiles_h, tiles_w, first, count):
    """Per tile of the ``count`` from ``first``: its 6x6 patch's top-left row and column in
    its image, and that image's offset in the flat batch (``image_size`` apart). Computed
    once per call: divisions per tile and channel cost more than the transforms."""
    per_image = tiles_h * tiles_w
    rows, cols = np.empty(count, np.int64), np.empty(count, np.int64)
    images = np.empty(count, np.int64)
    for t in range(count):
        tile = first + t
        rows[t] = (tile % per_image) // tiles_w * TILE - pad_h
        cols[t] = tile % tiles_w * TILE - pad_w
        images[t] = tile // per_image * image_size
    return rows, cols, images


@njit(cache=True, inline="always")
def _gather_patches(im, plane_at, height, width, rows, cols, images, count, patches, at, step):
    """patches[at + (j, i) step + t] = pixel (i, j) of tile t's 6x6 patch (0 outside the
    image), column by column, in the plane at ``plane_at`` of each tile's image
    (``_patch_corners``)."""
    for t in range(count):
        row0, col0 = rows[t], cols[t]
        base = images[t] + plane_at
        inside = row0 >= 0 and col0 >= 0 and row0 + PATCH <= height and col0 + PATCH <= width
        for i in range(PATCH):
            r = row0 + i
            for j in range(PATCH):
                q = col0 + j
                if inside or (0 <= r < height and 0 <= q < width):
                    value = im[uintp(base + r * width + q)]
                else:
                    value = float32(0)
                patches[uintp(at + (j * PATCH + i) * step + t)] = value


@njit(cache=True)
def _channel_blocks(channels, count):
    """(channels a block, blocks) for the transforms: about BLOCK_PAIRS (channel, tile)
    pairs a block, at least one channel."""
    per_block = max(1, min(channels, BLOCK_PAIRS // count))
    return per_block, (channels + per_block - 1) // per_block


@njit(cache=True, nogil=True)
def _input_block(im, c0, block, plane, channels, height, width, rows, cols, images, count, v):
    """V[:, c0:c0 + block, :] of the ``count`` tiles whose patches ``_patch_corners``
    placed: the channels' patches side by side, so that both passes of B run over block x
    count values and write V's rows (36 of them, channels x count apart) in runs that long.
    A function of its own, not inlined into input_transform's serial and threaded loops:
    compiled into both, its vectorised loops added seconds to the module's first compile."""
    n = block * count
    patches = np.empty(POINTS * n, np.float32)
    columns = np.empty(POINTS * n, np.float32)
    for o in range(block):
        _gather_patches(im, (c0 + o) * plane, height, width, rows, cols, images, count,
                        patches, o * count, n)
    for j in range(PATCH):  # B^T d, column j: columns[(j, i'), (c, t)]
        _input_columns(patches, j * PATCH * n, columns, j * PATCH * n, n)
    for i in range(PATCH):  # (B^T d) B, row i': V[(i', j'), c, t]
        _input_rows(columns, i * n, PATCH * n, v, (i * PATCH * channels + c0) * count,
                    channels * count, n)


@njit(cache=True, nogil=True)
def _input_layout(channels, height, width, pad_h, pad_w, tiles_h, tiles_w, first, count):
    """What both input loops need: (plane, the patches' rows, columns and image offsets,
    channels a block, blocks)."""
    plane = height * width
    rows, cols, images = _patch_corners(channels * plane, height, width, pad_h, pad_w,
                                        tiles_h, tiles_w, first, count)
    return (plane, rows, cols, images) + _channel_blocks(channels, count)


@njit(cache=True, nogil=True)
def input_tiles(im, channels, height, width, pad_h, pad_w, tiles_h, tiles_w, first, count, v):
    """``input_transform`` on the calling thread."""
    plane, rows, cols, images, per_block, _ = _input_layout(
        channels, height, width, pad_h, pad_w, tiles_h, tiles_w, first, count)
    for c0 in range(0, channels, per_block):
        _input_block(im, c0, min(per_block, channels - c0), plane, channels, height, width,
                     rows, cols, images, count, v)


@njit(cache=True, parallel=True)
def input_transform(im, channels, height, width, pad_h, pad_w, tiles_h, tiles_w, first, count,
                    v):
    """V (36, channels, count) of the ``count`` tiles from ``first``: ``im`` holds the batch
    (num, channels, height, width), flat; ``v`` is flat. Channels go in blocks of about
    BLOCK_PAIRS (channel, tile) pairs."""
    if channels * count < PARALLEL_MIN_JOBS:
        input_tiles(im, channels, height, width, pad_h, pad_w, tiles_h, tiles_w, first, count,
                    v)
        return
    plane, rows, cols, images, per_block, blocks = _input_layout(
        channels, height, width, pad_h, pad_w, tiles_h, tiles_w, first, count)
    for block in prange(blocks):
        c0 = block * per_block
        _input_block(im, c0, min(per_block, channels - c0), plane, channels, height, width,
                     rows, cols, images, count, v)


@njit(cache=True)
def _tile_corners(image_size, out_h, out_w, tiles_h, tiles_w, first, count):
    """Per output tile of the ``count`` from ``first``: the flat offset of its top-left
    element in channel 0 of its image (images ``image_size`` apart), and how many of its
    rows and columns lie inside the output. Computed once per call (see _patch_corners)."""
    per_image = tiles_h * tiles_w
    starts = np.empty(count, np.int64)
    heights, widths = np.empty(count, np.int64), np.empty(count, np.int64)
    for t in range(count):
        tile = first + t
        row0 = (tile % per_image) // tiles_w * TILE
        col0 = tile % tiles_w * TILE
        starts[t] = tile // per_image * image_size + row0 * out_w + col0
        heights[t], widths[t] = min(TILE, out_h - row0), min(TILE, out_w - col0)
    return starts, heights, widths


@njit(cache=True, inline="always")
def _scatter_tiles(tiles, at, step, count, starts, heights, widths, plane_at, out_w, out):
    """out[tile t's place] = tiles[at + (a, b) step + t], the parts inside the output. Whole
    tiles take a loop of constant extent, which LLVM unrolls: the output transform ran
    slower with the one clipped loop for every tile (docs/kernel-choices.md, "Winograd's
    transforms")."""
    for t in range(count):
        start = plane_at + starts[t]
        if heights[t] == TILE and widths[t] == TILE:
            for a in range(TILE):
                for k in range(TILE):
                    out[uintp(start + a * out_w + k)] = tiles[uintp(at + (a * TILE + k) * step
                                                                    + t)]
        else:
            for a in range(heights[t]):
                for k in range(widths[t]):
                    out[uintp(start + a * out_w + k)] = tiles[uintp(at + (a * TILE + k) * step
                                                                    + t)]


@njit(cache=True, nogil=True)
def _output_block(m, o0, channels, out_channels, plane, out_w, count, starts, heights, widths,
                  bias, has_bias, slope, has_relu, out):
    """Output channels [o0, o0 + channels) of the ``count`` tiles that ``_tile_corners``
    placed. The channels' rows of M lie side by side (M is (36, out_channels, count)), so
    both passes of A run over channels x count values at once."""
    n = channels * count
    rows = np.empty(TILE * PATCH * n, np.float32)
    tiles = np.empty(TILE * TILE * n, np.float32)
    for j in range(PATCH):  # A^T M, column j: rows[(a, j), (o, t)]
        _output_rows(m, (j * out_channels + o0) * count, PATCH * out_channels * count, rows,
                     j * n, PATCH * n, n)
    for a in range(TILE):  # (A^T M) A, row a: tiles[(a, b), (o, t)]
        _output_rows(rows, a * PATCH * n, n, tiles, a * TILE * n, n, n)
    for o in range(channels):
        b = bias[o0 + o] if has_bias else float32(0)
        for k in range(TILE * TILE):
            at = k * n + o * count
            for t in range(count):
                value = tiles[uintp(at + t)] + b
                if has_relu:
                    value = _rectify(value, slope)
                tiles[uintp(at + t)] = value
        _scatter_tiles(tiles, o * count, n, count, starts, heights, widths, (o0 + o) * plane,
                       out_w, out)


@njit(cache=True, nogil=True)
def _output_layout(out_channels, out_h, out_w, tiles_h, tiles_w, first, count):
    """What both output loops need: (plane, the tiles' starts, heights and widths, channels a
    block, blocks)."""
    plane = out_h * out_w
    starts, heights, widths = _tile_corners(out_channels * plane, out_h, out_w, tiles_h,
                                            tiles_w, first, count)
    return (plane, starts, heights, widths) + _channel_blocks(out_channels, count)


@njit(cache=True, nogil=True)
def output_tiles(m, out_channels, out_h, out_w, tiles_h, tiles_w, first, count, bias,
                 has_bias, slope, has_relu, out):
    """``output_transform`` on the calling thread."""
    plane, starts, heights, widths, per_block, _ = _output_layout(
        out_channels, out_h, out_w, tiles_h, tiles_w, first, count)
    for o0 in range(0, out_channels, per_block):
        _output_block(m, o0, min(per_block, out_channels - o0), out_channels, plane, out_w,
                      count, starts, heights, widths, bias, has_bias, slope, has_relu, out)


@njit(cache=True, parallel=True)
def output_transform(m, out_channels, out_h, out_w, tiles_h, tiles_w, first, count, bias,
                     has_bias, slope, has_relu, out):
    """out (num, out_channels, out_h, out_w) tiles [first, first + count) from M (36,
    out_channels, count), flat, (+ bias[o]) (then ReLU with negative slope ``slope``).
    Channels go in blocks of about BLOCK_PAIRS (channel, tile) pairs."""
    if out_channels * count < PARALLEL_MIN_JOBS:
        output_tiles(m, out_channels, out_h, out_w, tiles_h, tiles_w, first, count, bias,
                     has_bias, slope, has_relu, out)
        return
    plane, starts, heights, widths, per_block, blocks = _output_layout(
        out_channels, out_h, out_w, tiles_h, tiles_w, first, count)
    for block in prange(blocks):
        o0 = block * per_block
        _output_block(m, o0, min(per_block, out_channels - o0), out_channels, plane, out_w,
                      count, starts, heights, widths, bias, has_bias, slope, has_relu, out)


@njit(cache=True, nogil=True)
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
    bias = bias if has_bias else NO_BIAS
    slope = np.float32(relu_slope if has_relu else 0)
    for first in range(0, total, block):
        count = min(block, total - first)
        v_block = v[:POINTS * channels * count]
        m_block = m[:POINTS * out_channels * count]
        input_transform(im, channels, height, width, pad_h, pad_w, tiles_h, tiles_w, first,
                        count, v_block)
        matmul(u, v_block.reshape(POINTS, channels, count),
               m_block.reshape(POINTS, out_channels, count))
        output_transform(m_block, out_channels, out_h, out_w, tiles_h, tiles_w, first, count,
                         bias, has_bias, slope, has_relu, out)
