"""Per-channel statistics and the normalisations built on them, on the GPU (BatchNorm, MVN).

A blob is viewed as (num, channels, inner): channel ``c`` is the ``num * inner`` values at
``n * channels * inner + c * inner + s``. BatchNorm uses its (N, C, H*W...) view; MVN its rows
as (1, rows, dim).

Reductions (``moments``, ``dot_means``) give each channel one block (a block takes channels
``blockIdx, blockIdx + gridDim, ...`` when there are more channels than blocks). The block's
threads walk the channel in a grid-stride order fixed by the launch size and add in float64;
the block then folds its threads' partial sums in shared memory. So: no atomics, the same
sums on every run, and the statistics never leave the device.

The element-wise kernels apply the statistics:

    normalize:           y = x - mean[c]                      (divide false)
                         y = (x - mean[c]) / scale[c]         (divide true)
    normalize_backward:  FULL:    dx = (dy - mdy[c] - mdyy[c] * y) / scale[c]
                         SCALE:   dx = dy / scale[c]
                         CENTRE:  dx = dy - mdy[c]

with mdy = mean(dy) and mdyy = mean(dy * y) per channel (from ``dot_means``).
"""
import numpy as np
from numba import cuda

from pycaffe_cli.cuda import launch as launching
from pycaffe_cli.cuda.launch import launch

REDUCE_THREADS = 256  # shared-memory size of the block fold; a power of two
WARP = launching.WARP

FULL = 0
SCALE = 1
CENTRE = 2


@cuda.jit(device=True)
def _fold(shared, start, stop, tid):
    """Sum each row of ``shared[start:stop, :blockDim]`` (every thread has written its column
    and the block has synchronised) into ``shared[row, 0]``: halve with barriers down to one
    warp's worth, then thread 0 adds those in order. Only thread 0 may read the sums."""
    count = cuda.blockDim.x
    while count > WARP:
        count //= 2
        if tid < count:
            for row in range(start, stop):
                shared[row, tid] += shared[row, tid + count]
        cuda.syncthreads()
    if tid == 0:
        for row in range(start, stop):
            total = shared[row, 0]
            for k in range(1, count):
                total += shared[row, k]
            shared[row, 0] = total


@cuda.jit(cache=True)
def _moments_kernel(channels, num, inner, x, mean, var):
    # row 0 folds the sums of x, row 1 the squares: thread 0 reads a row only before the
    # barrier that precedes the row's next use, so no barrier closes an iteration
    shared = cuda.shared.array((2, REDUCE_THREADS), np.float64)
    mu_shared = cuda.shared.array(1, np.float32)
    tid = cuda.threadIdx.x
    per_channel = num * inner
    stride = channels * inner
    for c in range(cuda.blockIdx.x, channels, cuda.gridDim.x):
        total = 0.0
        for j in range(tid, per_channel, cuda.blockDim.x):
            total += np.float64(x[(j // inner) * stride + c * inner + j % inner])
        shared[0, tid] = total
        cuda.syncthreads()
        _fold(shared, 0, 1, tid)
        if tid == 0:
            mu_shared[0] = np.float32(shared[0, 0] / per_channel)
        cuda.syncthreads()
        mu = mu_shared[0]
        total = 0.0
        for j in range(tid, per_channel, cuda.blockDim.x):
            centred = x[(j // inner) * stride + c * inner + j % inner] - mu
            total += np.float64(centred * centred)
        shared[1, tid] = total
        cuda.syncthreads()
        _fold(shared, 1, 2, tid)
        if tid == 0:
            mean[c] = mu
            var[c] = np.float32(shared[1, 0] / per_channel)


@cuda.jit(cache=True)
def _dot_means_kernel(channels, num, inner, dy, y, with_y, mean_dy, mean_dy_y):
    # rows 0-1 on even iterations, 2-3 on odd ones: thread 0 has read a pair before the
    # barrier of the next iteration, which comes before the pair's next use
    shared = cuda.shared.array((4, REDUCE_THREADS), np.float64)
    tid = cuda.threadIdx.x
    per_channel = num * inner
    stride = channels * inner
    first = 0
    for c in range(cuda.blockIdx.x, channels, cuda.gridDim.x):
        total = 0.0
        total_y = 0.0
        for j in range(tid, per_channel, cuda.blockDim.x):
            index = (j // inner) * stride + c * inner + j % inner
            value = np.float64(dy[index])
            total += value
            if with_y:
                total_y += value * np.float64(y[index])
        shared[first, tid] = total
        shared[first + 1, tid] = total_y
        cuda.syncthreads()
        _fold(shared, first, first + (2 if with_y else 1), tid)
        if tid == 0:
            mean_dy[c] = np.float32(shared[first, 0] / per_channel)
            if with_y:
                mean_dy_y[c] = np.float32(shared[first + 1, 0] / per_channel)
        first = 2 - first


@cuda.jit(cache=True)
def _normalize_kernel(n, channels, inner, x, mean, scale, divide, y, y_copy):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        c = (index // inner) % channels
        value = x[index] - mean[c]
        if divide:
            value = value / scale[c]
        y[index] = value
        y_copy[index] = value


@cuda.jit(cache=True)
def _normalize_backward_kernel(n, channels, inner, op, dy, y, mean_dy, mean_dy_y, scale, dx):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        c = (index // inner) % channels
        value = dy[index]
        if op == SCALE:
            value = value / scale[c]
        else:
            value = value - mean_dy[c]
            if op == FULL:
                value = (value - mean_dy_y[c] * y[index]) / scale[c]
        dx[index] = value


def _reduce_launch(channels, per_channel):
    """(blocks, threads) for a per-channel reduction: a power of two of threads, no more than
    a channel needs (one warp at least), and one block per channel up to MAX_BLOCKS."""
    threads = min(REDUCE_THREADS, launching.THREADS_PER_BLOCK)
    threads = 1 << (threads.bit_length() - 1)
    while threads > launching.WARP and threads // 2 >= per_channel:
        threads //= 2
    return min(channels, launching.MAX_BLOCKS), threads


def moments(x, num, channels, inner, mean, var):
    """Per-channel mean and biased variance of ``x`` viewed (num, channels, inner).

    The mean is summed in float64 and rounded to float32; the variance is the float64 mean
    of the float32 squares of ``x - mean`` (the CPU paths' order of rounding), rounded to
    float32. ``mean`` and ``var`` are flat float32 device arrays of ``channels`` values.
    """
    if channels == 0 or num * inner == 0:
        return
    blocks, threads = _reduce_launch(channels, num * inner)
    _moments_kernel[blocks, threads](channels, num, inner, x, mean, var)


def dot_means(dy, y, num, channels, inner, mean_dy, mean_dy_y=None):
    """Per-channel mean(dy) and, when ``mean_dy_y`` is given, mean(dy * y) (float64 sums,
    float32 results)."""
    if channels == 0 or num * inner == 0:
        return
    with_y = mean_dy_y is not None
    blocks, threads = _reduce_launch(channels, num * inner)
    _dot_means_kernel[blocks, threads](channels, num, inner, dy, y, with_y, mean_dy,
                                       mean_dy_y if with_y else mean_dy)


def normalize(x, channels, inner, mean, scale, y, y_copy=None):
    """y = x - mean[c], divided by scale[c] when ``scale`` is given; also into ``y_copy``.
    ``x`` may be ``y`` (in place)."""
    divide = scale is not None
    launch(_normalize_kernel, x.size, channels, inner, x, mean, scale if divide else mean,
           divide, y, y if y_copy is None else y_copy)


def normalize_backward(op, dy, channels, inner, scale, dx, y=None, mean_dy=None,
                       mean_dy_y=None):
    """dx from dy by ``op`` (FULL, SCALE or CENTRE; see the module doc). Arguments an op does
    not read may be None. ``dy`` may be ``dx`` (in place)."""
    launch(_normalize_backward_kernel, dy.size, channels, inner, op, dy,
           dy if y is None else y, dy if mean_dy is None else mean_dy,
           dy if mean_dy_y is None else mean_dy_y, dy if scale is None else scale, dx)
