"""Reorderings between the image layout (N, C, P) and the channel layout (C, N, P) (CPU, numba).

A batched convolution GEMM produces its output as (C, N, P) -- one row per channel, the images
side by side -- while blobs hold (N, C, P); backward needs the reverse for the top diff. These
kernels move whole rows of P contiguous elements, a ``prange`` over rows, and fold in what a
separate numpy pass would otherwise do on the same data:

* ``channels_to_images_bias``: the bias add of the forward pass, ``y + b[c]`` in float32
  (``channels_to_images_bias_relu``: and a ReLU on the result, for the inference plan);
* ``images_to_channels_sum``: the bias gradient of the backward pass. Each channel's sum
  runs image after image, each image's row by numpy's float32 pairwise summation, so it is
  bitwise the ``diff.sum(axis=(0, 2))`` numpy computes for a contiguous (N, C, P) array.

``prange_parts`` says how many parts the kernels here and elsewhere (depthwise, max pooling)
split their jobs into.

Arrays are flat (1-d) C-contiguous views. Indices are cast to ``uintp``: numba cannot prove a
signed index non-negative, and its wraparound check keeps the copy loops from vectorising
(docs/kernel-choices.md, "Unsigned indices").
"""
import numpy as np
from numba import float32, float64, get_num_threads, njit, prange, uintp

from pycaffe_cli.blob import read_only

PAIRWISE_BLOCK = 128  # numpy's PW_BLOCKSIZE: runs up to this length sum with 8 accumulators
# Forward moves of fewer values run on one thread: waking numba's threads costs more than one
# thread takes to stream ~2M values through the cache (docs/kernel-choices.md, "Serial below
# a size").
PARALLEL_MIN = 1 << 21
# Stands in for a missing bias in the kernels that take one: read-only, like the blob's view
# where there is one, so each kernel compiles once.
NO_BIAS = read_only(np.zeros(1, np.float32))


def prange_parts(jobs):
    """How many ``prange`` parts to split ``jobs`` into: a few per thread, so that a kernel
    allocating its scratch once per part (not once per job) still balances its threads."""
    return max(1, min(jobs, 4 * get_num_threads()))


@njit(cache=True, inline="always")
def rectify(value, slope):
    """ReLU with negative slope ``slope`` (float32), as layers/relu.py computes it, to the bit:
    0 for value <= 0 without a slope (NaN stays NaN), else value * slope below zero."""
    if slope == 0:
        return float32(0) if value <= 0 else value
    return value if value > 0 else value * slope


# One row of each forward kernel below; the kernels run rows serially for arrays under
# PARALLEL_MIN values, else in a prange.
@njit(cache=True, inline="always")
def _images_row(src, num, channels, size, dst, row):
    first = ((row % channels) * num + row // channels) * size
    start = row * size
    for i in range(size):
        dst[uintp(start + i)] = src[uintp(first + i)]


@njit(cache=True, inline="always")
def _images_bias_row(src, num, channels, size, bias, dst, row):
    c = row % channels
    first = (c * num + row // channels) * size
    start = row * size
    b = bias[c]
    for i in range(size):
        dst[uintp(start + i)] = src[uintp(first + i)] + b


@njit(cache=True, inline="always")
def _images_bias_relu_row(src, num, channels, size, bias, slope, dst, row):
    c = row % channels
    first = (c * num + row // channels) * size
    start = row * size
    b = bias[c]
    for i in range(size):
        dst[uintp(start + i)] = rectify(src[uintp(first + i)] + b, slope)


@njit(cache=True, inline="always")
def _bias_relu_row(data, channels, size, bias, slope, row):
    start = row * size
    b = bias[row % channels]
    for i in range(size):
        data[uintp(start + i)] = rectify(data[uintp(start + i)] + b, slope)


@njit(cache=True, parallel=True, nogil=True)
def channels_to_images(src, num, channels, size, dst):
    """dst (num, channels, size) = src (channels, num, size)."""
    rows = num * channels
    if rows * size < PARALLEL_MIN:
        for row in range(rows):
            _images_row(src, num, channels, size, dst, row)
    else:
        for row in prange(rows):
            _images_row(src, num, channels, size, dst, row)


@njit(cache=True, parallel=True, nogil=True)
def channels_to_images_bias(src, num, channels, size, bias, dst):
    """dst (num, channels, size) = src (channels, num, size) + bias[channel]."""
    rows = num * channels
    if rows * size < PARALLEL_MIN:
        for row in range(rows):
            _images_bias_row(src, num, channels, size, bias, dst, row)
    else:
        for row in prange(rows):
            _images_bias_row(src, num, channels, size, bias, dst, row)


@njit(cache=True, parallel=True, nogil=True)
def channels_to_images_bias_relu(src, num, channels, size, bias, slope, dst):
    """dst (num, channels, size) = ReLU(src (channels, num, size) + bias[channel])."""
    rows = num * channels
    if rows * size < PARALLEL_MIN:
        for row in range(rows):
            _images_bias_relu_row(src, num, channels, size, bias, slope, dst, row)
    else:
        for row in prange(rows):
            _images_bias_relu_row(src, num, channels, size, bias, slope, dst, row)


@njit(cache=True, parallel=True, nogil=True)
def add_channel_bias_relu(data, num, channels, size, bias, slope):
    """data (num, channels, size) = ReLU(data + bias[channel]), in place."""
    rows = num * channels
    if rows * size < PARALLEL_MIN:
        for row in range(rows):
            _bias_relu_row(data, channels, size, bias, slope, row)
    else:
        for row in prange(rows):
            _bias_relu_row(data, channels, size, bias, slope, row)


@njit(cache=True, inline="always")
def _term(a, b, i, shift):
    """a[i] where ``b`` is None (numba compiles that case apart, without the branch), else
    (a[i] - shift) * (b[i] - shift): float32, the bits numpy's ``np.square(a - shift)`` or
    ``a * b`` (shift 0) would hold."""
    if b is None:
        return a[uintp(i)]
    return (a[uintp(i)] - shift) * (b[uintp(i)] - shift)


@njit(cache=True, inline="always")
def _pairwise_run(a, b, start, n, shift):
    """float32 sum of the terms start..start + n - 1 (``_term``) for n <= PAIRWISE_BLOCK, as
    numpy sums a run: short runs in sequence, the others with 8 interleaved accumulators."""
    if n < 8:
        total = float32(0.0)
        for i in range(start, start + n):
            total += _term(a, b, i, shift)
        return total
    r0, r1 = _term(a, b, start, shift), _term(a, b, start + 1, shift)
    r2, r3 = _term(a, b, start + 2, shift), _term(a, b, start + 3, shift)
    r4, r5 = _term(a, b, start + 4, shift), _term(a, b, start + 5, shift)
    r6, r7 = _term(a, b, start + 6, shift), _term(a, b, start + 7, shift)
    stop = n - n % 8
    for i in range(start + 8, start + stop, 8):
        r0 += _term(a, b, i, shift)
        r1 += _term(a, b, i + 1, shift)
        r2 += _term(a, b, i + 2, shift)
        r3 += _term(a, b, i + 3, shift)
        r4 += _term(a, b, i + 4, shift)
        r5 += _term(a, b, i + 5, shift)
        r6 += _term(a, b, i + 6, shift)
        r7 += _term(a, b, i + 7, shift)
    total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for i in range(start + stop, start + n):
        total += _term(a, b, i, shift)
    return total


@njit(cache=True, nogil=True)
def pairwise_dot(a, b, start, n, shift):
    """float32 sum of the terms i in [start, start + n) (``_term``: a[i] where ``b`` is None,
    else (a[i] - shift) * (b[i] - shift)) in numpy's pairwise order (``pairwise_sum`` in
    numpy's loops_utils.h): runs of up to PAIRWISE_BLOCK as ``_pairwise_run`` sums them,
    longer ones split in two half way, down to a multiple of 8. With ``a`` ``b``, the sum
    of squared deviations numpy gives for ``np.square(a - shift).sum()``; with shift 0,
    ``(a * b).sum()``."""
    if n <= PAIRWISE_BLOCK:
        return _pairwise_run(a, b, start, n, shift)
    half = n // 2
    half -= half % 8
    return pairwise_dot(a, b, start, half, shift) + pairwise_dot(a, b, start + half,
                                                                 n - half, shift)


@njit(cache=True, inline="always")
def pairwise_sum(a, start, n):
    """float32 sum of a[start:start + n], bitwise numpy's ``a[start:start + n].sum()``."""
    return pairwise_dot(a, None, start, n, float32(0.0))


@njit(cache=True, inline="always")
def channel_sum(a, b, num, channels, inner, c, shift):
    """float64 sum over channel c of (num, channels, inner) arrays, row by row, each row in
    ``pairwise_dot``'s order: of a[i] where ``b`` is None (compiled apart), else of
    (a[i] - shift) * (b[i] - shift)."""
    total = float64(0.0)
    for n in range(num):
        total += pairwise_dot(a, b, (n * channels + c) * inner, inner, shift)
    return total


@njit(cache=True, parallel=True, nogil=True)
def images_to_channels(src, num, channels, size, dst):
    """dst (channels, num, size) = src (num, channels, size)."""
    for row in prange(channels * num):
        first = ((row % num) * channels + row // num) * size
        start = row * size
        for i in range(size):
            dst[uintp(start + i)] = src[uintp(first + i)]


@njit(cache=True, parallel=True, nogil=True)
def images_to_channels_sum(src, num, channels, size, dst, sums):
    """dst (channels, num, size) = src (num, channels, size), and sums[c] += the sum of
    channel c, image by image (see the module doc). One job per channel."""
    for c in prange(channels):
        total = sums[c]
        for n in range(num):
            first = (n * channels + c) * size
            start = (c * num + n) * size
            for i in range(size):
                dst[uintp(start + i)] = src[uintp(first + i)]
            total += pairwise_sum(dst, start, size)
        sums[c] = total


@njit(cache=True, parallel=True, nogil=True)
def channel_sums(src, num, channels, size, sums):
    """sums[c] += the sum of channel c of src (num, channels, size), in the order of
    ``images_to_channels_sum``."""
    for c in prange(channels):
        total = sums[c]
        for n in range(num):
            total += pairwise_sum(src, (n * channels + c) * size, size)
        sums[c] = total
