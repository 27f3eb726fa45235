"""im2col / col2im: unfold convolution windows into a matrix and fold it back (CPU, numba).

Layout (Caffe's util/im2col.cpp). For one image of ``channels`` x H x W and a window of
``kernel_h`` x ``kernel_w``, the column matrix has one row per (channel, window offset) and one
column per output position::

    row r = (c * kernel_h + ki) * kernel_w + kj          (channels * kernel_h * kernel_w rows)
    col p = oh * out_w + ow                              (out_h * out_w columns)
    col[r, p] = image[c, oh * stride_h - pad_h + ki * dilation_h,
                         ow * stride_w - pad_w + kj * dilation_w]   (0 outside the image)

with ``out = conv_out_size(size, kernel, pad, stride, dilation)``. The N-d versions use the
same rule per spatial axis, kernel offsets and output positions both in C order.

Batched buffers hold ``num`` images in one of two layouts:

* ``batch_major=False``: (rows, num, P) -- the columns of all images side by side, so a
  convolution is ONE GEMM ``W (M x rows) @ col (rows x num P)`` over the batch;
* ``batch_major=True``: (num, rows, P) -- Caffe's per-image blocks (the Im2col layer's top).

``col2im`` is the adjoint of ``im2col``: every image element is the SUM of the column entries
that read it. Each image plane is owned by one thread, which adds up its own contributions in
Caffe's order (row by row), so no two threads ever write the same element and a GPU port
needs no atomics.

All arrays are flat (1-d) C-contiguous views; pass ``blob.data.reshape(-1)``. The 2-d kernels
index them with ``uintp`` casts: numba cannot prove a signed index non-negative, and its
wraparound handling kept the copy loops from vectorising (docs/kernel-choices.md, "Unsigned
indices").
"""
import numpy as np
from numba import njit, prange, uintp

from pycaffe_cli.layers.kernels.geometry import conv_out_size

# Column buffers of fewer values than this are unfolded and folded on one thread: waking
# numba's threads costs more than the work saved on smaller buffers (docs/kernel-choices.md,
# "Serial below a size").
PARALLEL_MIN = 1 << 20


@njit(cache=True, inline="always")
def _inside(offset, stride, size, out_size):
    """[lo, hi): the outputs o with 0 <= o * stride + offset < size, clipped to out_size."""
    lo = 0 if offset >= 0 else (-offset + stride - 1) // stride
    hi = (size - offset + stride - 1) // stride if size > offset else 0
    lo = min(lo, out_size)
    hi = min(max(hi, lo), out_size)
    return lo, hi


@njit(cache=True, inline="always")
def _strides(num, rows, plane, batch_major):
    """(row stride, image stride) of a batched column buffer."""
    if batch_major:
        return plane, rows * plane
    return num * plane, plane


@njit(cache=True, inline="always")
def _nd_sizes(kernel, im_shape, out_shape):
    """The element counts of an N-d window, image and output (products over the axes)."""
    kernel_size = 1
    im_size = 1
    out_size = 1
    for d in range(len(im_shape)):
        kernel_size *= kernel[d]
        im_size *= im_shape[d]
        out_size *= out_shape[d]
    return kernel_size, im_size, out_size


@njit(cache=True, nogil=True)
def _ranges(size, kernel, pad, stride, dilation, out_size):
    """``_inside`` for every kernel offset along one axis: row k is [lo, hi)."""
    ranges = np.empty((kernel, 2), np.int64)
    for k in range(kernel):
        ranges[k, 0], ranges[k, 1] = _inside(k * dilation - pad, stride, size, out_size)
    return ranges


@njit(cache=True, inline="always")
def _zero(array, start, stop):
    for i in range(start, stop):
        array[uintp(i)] = 0


@njit(cache=True, inline="always")
def _im2col_row(data, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                stride_h, stride_w, dilation_h, dilation_w, col, out_h, out_w, row_stride,
                image_stride, h_ranges, w_ranges, r):
    """Column row ``r`` of every image (see im2col_batch)."""
    plane = out_h * out_w
    kj = r % kernel_w
    ki = (r // kernel_w) % kernel_h
    c = r // (kernel_w * kernel_h)
    h_off = ki * dilation_h - pad_h
    w_off = kj * dilation_w - pad_w
    oh0, oh1 = h_ranges[ki, 0], h_ranges[ki, 1]
    lo, hi = w_ranges[kj, 0], w_ranges[kj, 1]
    for n in range(num):
        first = r * row_stride + n * image_stride
        image = (n * channels + c) * height
        _zero(col, first, first + oh0 * out_w)
        for oh in range(oh0, oh1):
            dst = first + oh * out_w
            src = (image + oh * stride_h + h_off) * width + w_off
            _zero(col, dst, dst + lo)
            if stride_w == 1:
                for ow in range(lo, hi):
                    col[uintp(dst + ow)] = data[uintp(src + ow)]
            else:
                for ow in range(lo, hi):
                    col[uintp(dst + ow)] = data[uintp(src + ow * stride_w)]
            _zero(col, dst + hi, dst + out_w)
        _zero(col, first + oh1 * out_w, first + plane)


@njit(cache=True, nogil=True)
def window_ranges(height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h, stride_w,
                  dilation_h, dilation_w, out_h, out_w):
    """(rows, columns): for each kernel row (column) offset, the [lo, hi) of output rows
    (columns) whose windows read inside the image there."""
    return (_ranges(height, kernel_h, pad_h, stride_h, dilation_h, out_h),
            _ranges(width, kernel_w, pad_w, stride_w, dilation_w, out_w))


@njit(cache=True, inline="always")
def _span_row(data, stride_w, col, dst, src, start, stop, lo, hi):
    """col[dst + ow] for output columns [start, stop) of one output row: the image row at
    ``src`` (column ow reads src + ow * stride_w) inside [lo, hi), zeros outside."""
    inner_lo, inner_hi = max(start, lo), min(stop, hi)
    _zero(col, dst + start, dst + max(start, min(stop, lo)))
    if stride_w == 1:  # a plain copy, which vectorises
        for ow in range(inner_lo, inner_hi):
            col[uintp(dst + ow)] = data[uintp(src + ow)]
    else:
        for ow in range(inner_lo, inner_hi):
            col[uintp(dst + ow)] = data[uintp(src + ow * stride_w)]
    _zero(col, dst + max(start, min(stop, hi), inner_lo), dst + stop)


@njit(cache=True, nogil=True)
def im2col_span(data, channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h,
                stride_w, dilation_h, dilation_w, out_w, h_ranges, w_ranges, first, stop,
                col, lead):
    """Columns [first, stop) (output positions) of one image's column matrix, as a matrix
    of its own: ``col[r * lead + p - first]`` (``lead`` >= stop - first). What one block of a
    convolution reads (kernels/cpu/conv_image.py); ``h_ranges`` and ``w_ranges`` are
    ``window_ranges``'."""
    for r in range(channels * kernel_h * kernel_w):
        kj = r % kernel_w
        ki = (r // kernel_w) % kernel_h
        c = r // (kernel_w * kernel_h)
        oh0, oh1 = h_ranges[ki, 0], h_ranges[ki, 1]
        lo, hi = w_ranges[kj, 0], w_ranges[kj, 1]
        p = first
        while p < stop:
            oh = p // out_w
            start = p - oh * out_w
            end = min(out_w, start + stop - p)
            dst = r * lead + oh * out_w - first
            if oh < oh0 or oh >= oh1:
                _zero(col, dst + start, dst + end)
            else:
                src = ((c * height + oh * stride_h + ki * dilation_h - pad_h) * width
                       + kj * dilation_w - pad_w)
                _span_row(data, stride_w, col, dst, src, start, end, lo, hi)
            p += end - start


@njit(cache=True, parallel=True, nogil=True)
def im2col_batch(data, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                 stride_h, stride_w, dilation_h, dilation_w, col, batch_major):
    """Unfold ``num`` images (num, channels, height, width) into ``col`` (see module doc).

    Parallel over the column rows (serially below PARALLEL_MIN values); each row's outputs
    are written contiguously. The in-image output ranges of every kernel offset are computed
    once per call, so the inner loops are plain copies (contiguous ones for stride 1) between
    runs of zeros.
    """
    out_h = conv_out_size(height, kernel_h, pad_h, stride_h, dilation_h)
    out_w = conv_out_size(width, kernel_w, pad_w, stride_w, dilation_w)
    rows = channels * kernel_h * kernel_w
    row_stride, image_stride = _strides(num, rows, out_h * out_w, batch_major)
    h_ranges = _ranges(height, kernel_h, pad_h, stride_h, dilation_h, out_h)
    w_ranges = _ranges(width, kernel_w, pad_w, stride_w, dilation_w, out_w)
    if rows * num * out_h * out_w < PARALLEL_MIN:
        for r in range(rows):
            _im2col_row(data, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                        stride_h, stride_w, dilation_h, dilation_w, col, out_h, out_w,
                        row_stride, image_stride, h_ranges, w_ranges, r)
    else:
        for r in prange(rows):
            _im2col_row(data, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                        stride_h, stride_w, dilation_h, dilation_w, col, out_h, out_w,
                        row_stride, image_stride, h_ranges, w_ranges, r)


@njit(cache=True, inline="always")
def _col2im_plane(col, channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h,
                  stride_w, dilation_h, dilation_w, data, out_w, row_stride, image_stride,
                  h_ranges, w_ranges, plane):
    """Image plane ``plane`` (image n, channel c) of col2im_batch."""
    n = plane // channels
    c = plane % channels
    base = plane * height * width
    _zero(data, base, base + height * width)
    for ki in range(kernel_h):
        h_off = ki * dilation_h - pad_h
        for kj in range(kernel_w):
            w_off = kj * dilation_w - pad_w
            lo, hi = w_ranges[kj, 0], w_ranges[kj, 1]
            first = ((c * kernel_h + ki) * kernel_w + kj) * row_stride + n * image_stride
            for oh in range(h_ranges[ki, 0], h_ranges[ki, 1]):
                src = first + oh * out_w
                dst = base + (oh * stride_h + h_off) * width + w_off
                if stride_w == 1:
                    for ow in range(lo, hi):
                        data[uintp(dst + ow)] += col[uintp(src + ow)]
                else:
                    for ow in range(lo, hi):
                        data[uintp(dst + ow * stride_w)] += col[uintp(src + ow)]


@njit(cache=True, parallel=True, nogil=True)
def col2im_batch(col, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                 stride_h, stride_w, dilation_h, dilation_w, data, batch_major):
    """Fold ``col`` back into ``num`` images, overwriting ``data``: the adjoint of im2col.

    Parallel over image planes (n, c) (serially below PARALLEL_MIN column values); each
    plane adds up its own column rows, kernel offset by kernel offset. One offset reaches an
    image element at most once, so every element sums its contributions in row order
    (Caffe's order) whatever the loop inside an offset.
    """
    out_h = conv_out_size(height, kernel_h, pad_h, stride_h, dilation_h)
    out_w = conv_out_size(width, kernel_w, pad_w, stride_w, dilation_w)
    rows = channels * kernel_h * kernel_w
    row_stride, image_stride = _strides(num, rows, out_h * out_w, batch_major)
    h_ranges = _ranges(height, kernel_h, pad_h, stride_h, dilation_h, out_h)
    w_ranges = _ranges(width, kernel_w, pad_w, stride_w, dilation_w, out_w)
    # Job j folds plane (j % a) b + (j // a) d: in the (rows, num, P) layout the images of
    # one channel in turn, so neighbouring jobs read neighbouring stretches of each column
    # row (taken image by image, each job read its own stretch of every row, far apart, and
    # ran slower). Arithmetic, not a branch: with the order chosen by an if, LLVM made the
    # fold slower (docs/kernel-choices.md, "col2im's job order").
    a, b, d = (channels, 1, channels) if batch_major else (num, channels, 1)
    if rows * num * out_h * out_w < PARALLEL_MIN:
        for job in range(num * channels):
            _col2im_plane(col, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                          stride_h, stride_w, dilation_h, dilation_w, data, out_w, row_stride,
                          image_stride, h_ranges, w_ranges, (job % a) * b + (job // a) * d)
    else:
        for job in prange(num * channels):
            _col2im_plane(col, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                          stride_h, stride_w, dilation_h, dilation_w, data, out_w, row_stride,
                          image_stride, h_ranges, w_ranges, (job % a) * b + (job // a) * d)


def im2col(data, channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h,
           stride_w, dilation_h, dilation_w, col):
    """Caffe's im2col_cpu for one image: col (channels kernel_h kernel_w, out_h out_w).
    Called from Python, so im2col_batch compiles for the layers' argument types only (a
    jitted caller would pass 1 and True as literals, a second compile of the batch kernel)."""
    im2col_batch(data, 1, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                 stride_h, stride_w, dilation_h, dilation_w, col, True)


def col2im(col, channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h,
           stride_w, dilation_h, dilation_w, data):
    """Caffe's col2im_cpu for one image (``data`` is overwritten with the folded sums), from
    Python as ``im2col``."""
    col2im_batch(col, 1, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                 stride_h, stride_w, dilation_h, dilation_w, data, True)


@njit(cache=True, nogil=True)
def nd_out_shape(im_shape, kernel, pad, stride, dilation):
    """Per-axis conv output sizes (int64 array) of an N-d window."""
    out = np.empty(len(im_shape), np.int64)
    for d in range(len(im_shape)):
        out[d] = conv_out_size(im_shape[d], kernel[d], pad[d], stride[d], dilation[d])
    return out


@njit(cache=True, parallel=True, nogil=True)
def im2col_nd(data, num, channels, im_shape, kernel, pad, stride, dilation, col, batch_major):
    """N-d im2col (Caffe's im2col_nd_cpu) for ``num`` images (num, channels, *im_shape).

    ``im_shape``, ``kernel``, ``pad``, ``stride``, ``dilation``: int64 arrays, one value per
    spatial axis. Rows are (c, k_0, ..., k_{D-1}), columns (o_0, ..., o_{D-1}), C order.
    """
    axes = len(im_shape)
    out_shape = nd_out_shape(im_shape, kernel, pad, stride, dilation)
    kernel_size, im_size, out_size = _nd_sizes(kernel, im_shape, out_shape)
    rows = channels * kernel_size
    row_stride, image_stride = _strides(num, rows, out_size, batch_major)
    for r in prange(rows):
        c = r // kernel_size
        offset = np.empty(axes, np.int64)
        rest = r % kernel_size
        for d in range(axes - 1, -1, -1):
            offset[d] = (rest % kernel[d]) * dilation[d] - pad[d]
            rest //= kernel[d]
        for n in range(num):
            image = (n * channels + c) * im_size
            dst = r * row_stride + n * image_stride
            for p in range(out_size):
                rest = p
                index = 0
                scale = 1
                inside = True
                for d in range(axes - 1, -1, -1):
                    i = (rest % out_shape[d]) * stride[d] + offset[d]
                    rest //= out_shape[d]
                    if i < 0 or i >= im_shape[d]:
                        inside = False
                        break
                    index += i * scale
                    scale *= im_shape[d]
                col[dst + p] = data[image + index] if inside else 0


@njit(cache=True, parallel=True, nogil=True)
def col2im_nd(col, num, channels, im_shape, kernel, pad, stride, dilation, data, batch_major):
    """N-d col2im: the adjoint of ``im2col_nd``, overwriting ``data`` (a per-element gather)."""
    axes = len(im_shape)
    out_shape = nd_out_shape(im_shape, kernel, pad, stride, dilation)
    kernel_size, im_size, out_size = _nd_sizes(kernel, im_shape, out_shape)
    rows = channels * kernel_size
    row_stride, image_stride = _strides(num, rows, out_size, batch_major)
    for plane in prange(num * channels):
        n = plane // channels
        c = plane % channels
        position = np.empty(axes, np.int64)
        for q in range(im_size):
            rest = q
            for d in range(axes - 1, -1, -1):
                position[d] = rest % im_shape[d]
                rest //= im_shape[d]
            element = plane * im_size + q
            data[element] = 0
            for k in range(kernel_size):
                rest = k
                index = 0
                scale = 1
                hit = True
                for d in range(axes - 1, -1, -1):
                    t = position[d] + pad[d] - (rest % kernel[d]) * dilation[d]
                    rest //= kernel[d]
                    if t < 0 or t % stride[d] != 0 or t // stride[d] >= out_shape[d]:
                        hit = False
                        break
                    index += (t // stride[d]) * scale
                    scale *= out_shape[d]
                if hit:
                    data[element] += col[(c * kernel_size + k) * row_stride
                                         + n * image_stride + index]
