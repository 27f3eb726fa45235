"""im2col / col2im on the GPU (numba.cuda): the CPU kernels' names, signatures and layouts.

Same column layout as ``kernels/cpu/im2col.py`` (see its module doc): for one image, row
``r = (c * kernel_h + ki) * kernel_w + kj`` and column ``p = oh * out_w + ow``, with ``num``
images either side by side (``batch_major=False``: (rows, num, P)) or in per-image blocks
(``batch_major=True``: (num, rows, P)). Arrays are flat 1-d device arrays.

One thread per OUTPUT element, in both directions, so neither kernel needs atomics:

* im2col: one column entry reads its image element (or 0 in the padding);
* col2im: one image element GATHERS the column entries that read it (Caffe's
  col2im_gpu_kernel). The windows holding image row ``h`` are the outputs ``oh`` with
  ``0 <= h + pad - oh * stride <= dilation (kernel - 1)`` and a multiple of ``dilation``.
  They are visited with ``oh`` and ``ow`` DESCENDING, i.e. kernel offsets ``(ki, kj)``
  ascending -- the CPU kernel's row order -- so the float32 sums are the CPU's, bit for bit.

The per-element bodies are plain Python functions (``*_at_py``) compiled here with
``device_function`` (pycaffe_cli/cuda/device.py, for its ``min``/``max`` workaround). The CPU
kernels do not share them: theirs are shaped for vectorised copy loops (one thread per image plane,
unsigned indexing; see ``kernels/cpu/im2col.py``).
"""
import numpy as np
from numba import cuda

from pycaffe_cli.cuda.device import device_function
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.kernels.geometry import conv_out_size_py

_conv_out_size = device_function(conv_out_size_py)


def im2col_at_py(data, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                 stride_h, stride_w, dilation_h, dilation_w, col, batch_major, out_h, out_w,
                 index):
    """col[index] = the image element that column entry reads, 0 in the padding."""
    plane = out_h * out_w
    rows = channels * kernel_h * kernel_w
    p = index % plane
    block = index // plane
    if batch_major:
        n = block // rows
        r = block % rows
    else:
        r = block // num
        n = block % num
    kj = r % kernel_w
    ki = (r // kernel_w) % kernel_h
    c = r // (kernel_w * kernel_h)
    h = (p // out_w) * stride_h - pad_h + ki * dilation_h
    w = (p % out_w) * stride_w - pad_w + kj * dilation_w
    if h >= 0 and h < height and w >= 0 and w < width:
        col[index] = data[((n * channels + c) * height + h) * width + w]
    else:
        col[index] = 0


def col2im_at_py(col, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                 stride_h, stride_w, dilation_h, dilation_w, data, batch_major, out_h, out_w,
                 index):
    """data[index] = the sum, in kernel-offset order, of the column entries that read it."""
    plane = out_h * out_w
    rows = channels * kernel_h * kernel_w
    if batch_major:
        row_stride = plane
        image_stride = rows * plane
    else:
        row_stride = num * plane
        image_stride = plane
    w_pad = index % width + pad_w
    h_pad = (index // width) % height + pad_h
    c = (index // (width * height)) % channels
    n = index // (width * height * channels)
    # outputs [o0, o1) whose window (extent = dilation (kernel - 1) + 1) holds the pixel
    extent_h = dilation_h * (kernel_h - 1) + 1
    extent_w = dilation_w * (kernel_w - 1) + 1
    oh0 = 0 if h_pad < extent_h else (h_pad - extent_h) // stride_h + 1
    oh1 = min(h_pad // stride_h + 1, out_h)
    ow0 = 0 if w_pad < extent_w else (w_pad - extent_w) // stride_w + 1
    ow1 = min(w_pad // stride_w + 1, out_w)
    first = c * kernel_h * kernel_w * row_stride + n * image_stride
    total = np.float32(0.0)
    for oh in range(oh1 - 1, oh0 - 1, -1):
        h_k = h_pad - oh * stride_h
        if h_k % dilation_h == 0:
            row = first + (h_k // dilation_h) * kernel_w * row_stride + oh * out_w
            for ow in range(ow1 - 1, ow0 - 1, -1):
                w_k = w_pad - ow * stride_w
                if w_k % dilation_w == 0:
                    total += col[row + (w_k // dilation_w) * row_stride + ow]
    data[index] = total


_im2col_at = device_function(im2col_at_py)
_col2im_at = device_function(col2im_at_py)


@cuda.jit(cache=True)
def _im2col_kernel(n, data, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                   stride_h, stride_w, dilation_h, dilation_w, col, batch_major):
    out_h = _conv_out_size(height, kernel_h, pad_h, stride_h, dilation_h)
    out_w = _conv_out_size(width, kernel_w, pad_w, stride_w, dilation_w)
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        _im2col_at(data, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                   stride_h, stride_w, dilation_h, dilation_w, col, batch_major, out_h, out_w,
                   index)


@cuda.jit(cache=True)
def _col2im_kernel(n, col, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                   stride_h, stride_w, dilation_h, dilation_w, data, batch_major):
    out_h = _conv_out_size(height, kernel_h, pad_h, stride_h, dilation_h)
    out_w = _conv_out_size(width, kernel_w, pad_w, stride_w, dilation_w)
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        _col2im_at(col, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                   stride_h, stride_w, dilation_h, dilation_w, data, batch_major, out_h, out_w,
                   index)


def im2col_batch(data, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                 stride_h, stride_w, dilation_h, dilation_w, col, batch_major):
    """Unfold ``num`` images (num, channels, height, width) into ``col`` (module doc)."""
    launch(_im2col_kernel, col.size, data, num, channels, height, width, kernel_h, kernel_w,
           pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w, col, bool(batch_major))


def col2im_batch(col, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                 stride_h, stride_w, dilation_h, dilation_w, data, batch_major):
    """Fold ``col`` back into ``num`` images, overwriting ``data``: the adjoint of im2col."""
    launch(_col2im_kernel, data.size, col, num, channels, height, width, kernel_h, kernel_w,
           pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w, data, bool(batch_major))


def im2col(data, channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h,
           stride_w, dilation_h, dilation_w, col):
    """Caffe's im2col_gpu for one image: col (channels kernel_h kernel_w, out_h out_w)."""
    im2col_batch(data, 1, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                 stride_h, stride_w, dilation_h, dilation_w, col, True)


def col2im(col, channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h,
           stride_w, dilation_h, dilation_w, data):
    """Caffe's col2im_gpu for one image (``data`` is overwritten with the folded sums)."""
    col2im_batch(col, 1, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                 stride_h, stride_w, dilation_h, dilation_w, data, True)
