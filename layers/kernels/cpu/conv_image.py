"""One image's convolution in blocks that each run from unfolding to bias on one thread
(CPU, numba + BLAS): the inference plan's pass at batch 1, and image by image for large
images at larger batches (layers/convolution/convolution.py).

The usual pass unfolds the image over the threads into one column buffer, multiplies in
blocks over the threads and adds the bias over the threads, each step split its own way, and
the buffer is the one every convolution of the net writes. So a thread mostly writes and
reads memory the other core wrote last, and each such cache line moves between the cores
first. Where that is slow (docs/benchmarks.md, "Two states of this machine") the second
thread saved nothing at batch 1. Here the product is cut into blocks as pycaffe_cli/blas.py
cuts it, each block is one job on one thread, and each thread unfolds into a part of the
column buffer that only it uses (by numba's thread id), so its columns stay in its core:

* a block of output columns (positions) unfolds its own columns of the image, multiplies
  the weights by them and adds the bias (and ReLU) to its columns of the output;
* a block of output rows (channels) reads every column: the first block a thread takes
  unfolds the whole image into that thread's part, its later blocks reuse it. Blocks of rows
  are chosen where the image is the smaller operand, so unfolding it twice costs little.

Blocks go to threads by ``blas.claim``: each thread takes its own part of the blocks first,
so from one pass to the next a thread computes the same blocks, and layer after layer cut
alike, it reads what its own core wrote.

1x1 windows with stride 1 and no padding are not unfolded: the image is its column matrix.
"""
import numpy as np
from numba import njit, prange, uintp

from pycaffe_cli.blas import claim, product, split, thread_part
from pycaffe_cli.layers.kernels.cpu.im2col import im2col_span, window_ranges
from pycaffe_cli.layers.kernels.cpu.layout import rectify
from pycaffe_cli.layers.kernels.geometry import conv_out_size


@njit(cache=True, nogil=True)
def _is_pointwise(kernel_h, kernel_w, pad_h, pad_w, stride_h, stride_w):
    return (kernel_h == 1 and kernel_w == 1 and pad_h == 0 and pad_w == 0 and stride_h == 1
            and stride_w == 1)


@njit(cache=True, nogil=True)
def _cut(channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h, stride_w,
         dilation_h, dilation_w, out_channels, workers):
    """(out_h, out_w, rows a block, columns a block, values of column buffer a thread)."""
    out_h = conv_out_size(height, kernel_h, pad_h, stride_h, dilation_h)
    out_w = conv_out_size(width, kernel_w, pad_w, stride_w, dilation_w)
    positions, depth = out_h * out_w, channels * kernel_h * kernel_w
    block_m, block_n = split(out_channels, positions, depth, workers)
    if block_m == 0:
        block_m, block_n = out_channels, positions
    per_thread = depth * block_n
    if _is_pointwise(kernel_h, kernel_w, pad_h, pad_w, stride_h, stride_w):
        per_thread = 0
    return out_h, out_w, block_m, block_n, per_thread


@njit(cache=True, nogil=True)
def scratch_size(channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h,
                 stride_w, dilation_h, dilation_w, out_channels, workers):
    """Values of column buffer ``forward`` needs on ``workers`` threads (numba's thread
    ids run from 0 to the thread count)."""
    per_thread = _cut(channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h,
                      stride_w, dilation_h, dilation_w, out_channels, workers)[4]
    return workers * per_thread


@njit(cache=True, nogil=True, inline="always")
def _bias_span(out, first_row, rows, first, cols, positions, bias, has_bias, slope, has_relu):
    """out[o, first:first + cols] += bias[o] (then ReLU) for rows [first_row, + rows)."""
    if not has_bias:
        return
    for o in range(first_row, first_row + rows):
        b = bias[o]
        at = o * positions + first
        for p in range(cols):
            value = out[uintp(at + p)] + b
            out[uintp(at + p)] = rectify(value, slope) if has_relu else value


@njit(cache=True, nogil=True)
def _run_blocks(im, channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h,
                stride_w, dilation_h, dilation_w, weights, out_channels, bias, has_bias, slope,
                has_relu, col, out, cut, h_ranges, w_ranges, claims, unfolded):
    """Take blocks (``blas.claim``) until none is left, on the calling thread (see the
    module docstring); ``cut`` is ``_cut``'s."""
    out_h, out_w, block_m, block_n, per_thread = cut
    positions, depth = out_h * out_w, channels * kernel_h * kernel_w
    by_rows = block_m < out_channels
    across = -(-positions // block_n)
    total = -(-out_channels // block_m) * across
    own, thread = thread_part(col, per_thread)
    have_all = per_thread == 0 or (thread >= 0 and unfolded[thread])
    j = claim(claims, total)
    while j < total:
        row0, first = (j // across) * block_m, (j % across) * block_n
        rows = min(block_m, out_channels - row0)
        cols = min(block_n, positions - first)
        if per_thread == 0:  # the image is the column matrix
            b_at, lead = im.ctypes.data + first * 4, positions
        else:
            if not have_all:
                im2col_span(im, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                            stride_h, stride_w, dilation_h, dilation_w, out_w, h_ranges,
                            w_ranges, first, first + cols, own, cols)
                have_all = by_rows
                if thread >= 0:
                    unfolded[thread] = by_rows
            b_at, lead = own.ctypes.data, cols
        product(rows, cols, depth, weights.ctypes.data + row0 * depth * 4, depth, b_at, lead,
                out.ctypes.data + (row0 * positions + first) * 4, positions)
        _bias_span(out, row0, rows, first, cols, positions, bias, has_bias, slope, has_relu)
        j = claim(claims, total)


@njit(cache=True, parallel=True, nogil=True)
def forward(im, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h,
            stride_w, dilation_h, dilation_w, weights, out_channels, bias, has_bias, slope,
            has_relu, col, out, workers):
    """out (num, out_channels, out_h, out_w) = weights (out_channels, channels, kernel_h,
    kernel_w) convolved with the images ``im`` (num, channels, height, width) (+ bias, then
    ReLU with negative slope ``slope``), all flat float32, one image after the other;
    ``col`` holds at least ``scratch_size`` values. One group, 2-d windows."""
    cut = _cut(channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h, stride_w,
               dilation_h, dilation_w, out_channels, workers)
    out_h, out_w, block_m, block_n, per_thread = cut
    h_ranges, w_ranges = window_ranges(height, width, kernel_h, kernel_w, pad_h, pad_w,
                                       stride_h, stride_w, dilation_h, dilation_w, out_h,
                                       out_w)
    blocks = -(-out_channels // block_m) * -(-(out_h * out_w) // block_n)
    in_size, out_size = channels * height * width, out_channels * out_h * out_w
    claims = np.empty(min(workers, blocks), np.int64)  # one part a thread (blas.claim)
    # Whether each thread's part of ``col`` holds the image's columns (blocks of rows).
    unfolded = np.empty(col.size // per_thread if per_thread else 0, np.bool_)
    for n in range(num):
        image, result = im[n * in_size:(n + 1) * in_size], out[n * out_size:(n + 1) * out_size]
        claims[:] = 0
        unfolded[:] = False
        if blocks == 1:
            _run_blocks(image, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                        stride_h, stride_w, dilation_h, dilation_w, weights, out_channels,
                        bias, has_bias, slope, has_relu, col, result, cut, h_ranges, w_ranges,
                        claims, unfolded)
            continue
        for _ in prange(claims.size):
            _run_blocks(image, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                        stride_h, stride_w, dilation_h, dilation_w, weights, out_channels,
                        bias, has_bias, slope, has_relu, col, result, cut, h_ranges, w_ranges,
                        claims, unfolded)
