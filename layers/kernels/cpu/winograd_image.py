"""One image's Winograd F(4x4, 3x3) convolution (winograd.py) in blocks that each run from
the input transform to the output transform on one thread: the inference plan's pass at
batch 1 (layers/convolution/convolution.py).

The batched pass transforms the input over the threads by channels, multiplies the 36
matrices over the threads, and transforms the output over the threads by channels, through
two scratch arrays that every Winograd layer of the net shares: each step mostly reads what
the other core wrote (conv_image.py's docstring has why that is slow). Here each thread
has its own V and M, and the product is cut as pycaffe_cli/blas.py cuts it, taking the 36
products together as one (M_out x tiles x 36 C):

* a block of tiles transforms its tiles' patches (every channel), multiplies, and
  transforms its tiles back into the output, with bias and ReLU;
* a block of output channels needs every tile's V: the first block a thread takes
  transforms the whole image into that thread's V, its later blocks reuse it; each
  multiplies and transforms back its own channels. Blocks of channels are chosen where the
  tiles are fewer than the output channels, so transforming the input twice costs little.

Blocks go to threads as in conv_image.py (``blas.claim``: each thread's own part first).
"""
import numpy as np
from numba import njit, prange

from pycaffe_cli.blas import claim, product, split, thread_part
from pycaffe_cli.layers.kernels.cpu.winograd import POINTS, input_tiles, output_tiles, \
    tile_counts
from pycaffe_cli.layers.kernels.geometry import conv_out_size


@njit(cache=True, nogil=True)
def _cut(channels, height, width, pad_h, pad_w, out_channels, workers):
    """(out_h, out_w, channels a block, tiles a block, V values a thread, M values a
    thread)."""
    out_h, out_w = conv_out_size(height, 3, pad_h, 1, 1), conv_out_size(width, 3, pad_w, 1, 1)
    tiles_h, tiles_w = tile_counts(out_h, out_w)
    tiles = tiles_h * tiles_w
    block_m, block_n = split(out_channels, tiles, POINTS * channels, workers)
    if block_m == 0:
        block_m, block_n = out_channels, tiles
    v_tiles = tiles if block_m < out_channels else block_n
    return (out_h, out_w, block_m, block_n, POINTS * channels * v_tiles,
            POINTS * block_m * block_n)


@njit(cache=True, nogil=True)
def scratch_sizes(channels, height, width, pad_h, pad_w, out_channels, workers):
    """(V values, M values) ``forward`` needs on ``workers`` threads (numba's thread ids
    run from 0 to the thread count)."""
    cut = _cut(channels, height, width, pad_h, pad_w, out_channels, workers)
    return workers * cut[4], workers * cut[5]


@njit(cache=True, nogil=True)
def _run_blocks(im, channels, height, width, pad_h, pad_w, u, out_channels, bias, has_bias,
                slope, has_relu, out, v, m, cut, claims, transformed):
    """Take blocks (``blas.claim``) until none is left, on the calling thread (see the
    module docstring); ``cut`` is ``_cut``'s."""
    out_h, out_w, block_m, block_n, v_size, m_size = cut
    tiles_h, tiles_w = tile_counts(out_h, out_w)
    tiles, plane = tiles_h * tiles_w, out_h * out_w
    by_rows = block_m < out_channels
    across = -(-tiles // block_n)
    total = -(-out_channels // block_m) * across
    own_v, thread = thread_part(v, v_size)
    own_m, _ = thread_part(m, m_size)
    have_all = thread >= 0 and transformed[thread]
    j = claim(claims, total)
    while j < total:
        row0, first = (j // across) * block_m, (j % across) * block_n
        rows, count = min(block_m, out_channels - row0), min(block_n, tiles - first)
        v_first, v_count = (0, tiles) if by_rows else (first, count)
        if not have_all:
            input_tiles(im, channels, height, width, pad_h, pad_w, tiles_h, tiles_w, v_first,
                        v_count, own_v)
            have_all = by_rows
            if thread >= 0:
                transformed[thread] = by_rows
        for xi in range(POINTS):  # M[xi] (rows x count) = U[xi, rows] @ V[xi, :, tiles]
            product(rows, count, channels,
                    u.ctypes.data + (xi * out_channels + row0) * channels * 4, channels,
                    own_v.ctypes.data + ((xi * channels) * v_count + first - v_first) * 4,
                    v_count, own_m.ctypes.data + xi * rows * count * 4, count)
        output_tiles(own_m, rows, out_h, out_w, tiles_h, tiles_w, first, count,
                     bias[row0:] if has_bias else bias, has_bias, slope, has_relu,
                     out[row0 * plane:])
        j = claim(claims, total)


@njit(cache=True, parallel=True, nogil=True)
def forward(im, channels, height, width, pad_h, pad_w, u, out_channels, bias, has_bias, slope,
            has_relu, out, v, m, workers):
    """out (out_channels, out_h, out_w) = the 3x3 convolution (stride 1) of the image ``im``
    (channels, height, width) by the weights whose transform is ``u`` (36, out_channels,
    channels) (winograd.transform_weights), + bias, then ReLU with negative slope ``slope``;
    all flat float32, ``v`` and ``m`` at least ``scratch_sizes``."""
    cut = _cut(channels, height, width, pad_h, pad_w, out_channels, workers)
    out_h, out_w, block_m, block_n, v_size, m_size = cut
    tiles_h, tiles_w = tile_counts(out_h, out_w)
    blocks = -(-out_channels // block_m) * -(-(tiles_h * tiles_w) // block_n)
    claims = np.zeros(min(workers, blocks), np.int64)  # one part a thread (blas.claim)
    # Whether each thread's V holds every tile (blocks of channels).
    transformed = np.zeros(v.size // v_size, np.bool_)
    if blocks == 1:
        _run_blocks(im, channels, height, width, pad_h, pad_w, u, out_channels, bias, has_bias,
                    slope, has_relu, out, v, m, cut, claims, transformed)
        return
    for _ in prange(claims.size):
        _run_blocks(im, channels, height, width, pad_h, pad_w, u, out_channels, bias, has_bias,
                    slope, has_relu, out, v, m, cut, claims, transformed)
