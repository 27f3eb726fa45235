"""The two backends of the (de)convolution plan: host numpy arrays and device arrays.

``BaseConvolutionLayer`` (base.py) writes the plan once -- forward_gemm,
backward_gemm, weight_gemm, backward_bias, with the 1x1 shortcut and grouped GEMMs -- in
terms of the primitives below; the mode picks the backend object that runs them. Every
array is flat (1-d, C-contiguous): a host view or a numba device array. With G groups,
``dims`` = (G, rows, depth, cols) sizes G products of (rows x depth) @ (depth x cols)::

    gemm_groups:  out_g = op(W_g) @ x_g        W_g (rows, depth), op = identity or ^T
    gemm_images:  out[n, g] = op(W_g) @ x[n, g] for every image n (1x1 windows, no im2col)
    weight_grad:  dW_g += y_g @ col_g^T
    to_channels:  dst (C, num, P) = src (num, C, P)   (+ channel sums, where fused)
    to_images:    dst (num, C, P) = src (C, num, P) (+ bias[c])
    add_bias:     data (num, C, P) += bias[c]
    bias_grad:    db[c] += sum over n, p of diff (num, C, P)

and, for 2-d windows whose groups make those GEMMs tiny (depthwise), the plan's DIRECT passes
on the blob layouts, no im2col (kernels/cpu/depthwise/ and its CUDA twin)::

    direct_forward:        mat = conv(im) (+ bias) (ReLU: CPU)  (forward_gemm)
    direct_backward_data:  im = conv^T(mat)                 (backward_gemm)
    direct_weight_grad:    dW += the window sums of mat x im (weight_gemm)
    direct_backward:       dW, db, dim from one pass over mat (Convolution's backward; the
                           CPU fuses the three, the GPU runs its kernels in turn)

The CPU backend runs its GEMMs through pycaffe_cli/blas.py (a private OpenBLAS spread over
numba's threads), the numba layout kernels, and the bias gradient in numpy's pairwise order,
fused into the reordering of the top diff. The GPU backend runs each GEMM on cuBLAS (or
pycaffe's fallback kernel), the layout and im2col kernels of kernels/cuda, and the bias
gradient as two GEMVs against ones.
"""
from typing import NamedTuple

import numpy as np

from pycaffe_cli import blas
from pycaffe_cli.cuda.views import first, starting_at
from pycaffe_cli.layers.kernels.cpu import depthwise, layout
from pycaffe_cli.layers.kernels.cpu.gemm import gemm_accumulate
from pycaffe_cli.sizes import grow

COLUMNS = "a column buffer"  # what grow names in its memory check


class GemmDims(NamedTuple):
    """Sizes of one grouped GEMM: ``groups`` products of (rows x depth) @ (depth x cols)."""
    groups: int
    rows: int
    depth: int
    cols: int


class CpuConvBackend:
    """The plan's primitives on flat host (numpy) arrays."""

    fuses_bias_sums = True  # to_channels can sum the bias gradient on its way
    columns_of = None  # what the column buffer holds: see BaseConvolutionLayer.note_columns

    def __init__(self):
        self._col = np.empty(0, np.float32)
        self._mat = np.empty(0, np.float32)

    # --- blobs and buffers ---------------------------------------------------------------
    @staticmethod
    def read_data(blob):
        return blob.flat_data

    @staticmethod
    def write_data(blob):
        return blob.flat_data

    @staticmethod
    def read_diff(blob):
        return blob.flat_diff

    @staticmethod
    def write_diff(blob):
        return blob.flat_diff

    def reserve(self, col_size, mat_size):
        """Grow the column and GEMM-output buffers now (sizes are checked here, at reshape)."""
        self._col = grow(self._col, col_size, COLUMNS)
        self._mat = grow(self._mat, mat_size, COLUMNS)

    def col_buffer(self, size):
        self._col = grow(self._col, size, COLUMNS)
        return self._col[:size]

    def mat_buffer(self, size):
        self._mat = grow(self._mat, size, COLUMNS)
        return self._mat[:size]

    # --- im2col and layouts --------------------------------------------------------------
    @staticmethod
    def im2col(geometry, im, count, col):
        geometry.im2col(im, count, col, False)

    @staticmethod
    def col2im(geometry, col, count, im):
        geometry.col2im(col, count, im, False)

    @staticmethod
    def to_channels(src, count, channels, size, dst, sums=None):
        if sums is None:
            layout.images_to_channels(src, count, channels, size, dst)
        else:
            layout.images_to_channels_sum(src, count, channels, size, dst, sums)

    @staticmethod
    def to_images(src, count, channels, size, dst, bias=None, relu_slope=None):
        if bias is None:
            layout.channels_to_images(src, count, channels, size, dst)
        elif relu_slope is None:
            layout.channels_to_images_bias(src, count, channels, size, bias, dst)
        else:
            layout.channels_to_images_bias_relu(src, count, channels, size, bias,
                                                np.float32(relu_slope), dst)

    # --- GEMMs -----------------------------------------------------------------------------
    @staticmethod
    def gemm_groups(trans_w, weights, x, out, dims):
        g, rows, depth, _ = dims
        w = weights.reshape(g, rows, depth)
        if trans_w:
            blas.matmul(w.transpose(0, 2, 1), x.reshape(g, rows, -1), out.reshape(g, depth, -1))
        else:
            blas.matmul(w, x.reshape(g, depth, -1), out.reshape(g, rows, -1))

    @staticmethod
    def gemm_images(trans_w, weights, x, out, count, dims):
        g, rows, depth, _ = dims
        w = weights.reshape(g, rows, depth)
        if trans_w:
            blas.matmul(w.transpose(0, 2, 1), x.reshape(count, g, rows, -1),
                        out.reshape(count, g, depth, -1))
        else:
            blas.matmul(w, x.reshape(count, g, depth, -1), out.reshape(count, g, rows, -1))

    @staticmethod
    def weight_grad(y, col, weight_diff, dims):
        g, rows, depth, _ = dims
        y, col = y.reshape(g, rows, -1), col.reshape(g, depth, -1)
        weight_diff = weight_diff.reshape(g, rows, depth)
        for i in range(g):
            gemm_accumulate(y[i], col[i].T, weight_diff[i])

    # --- direct (depthwise) passes ---------------------------------------------------------
    @staticmethod
    def direct_forward(geometry, im, count, weights, out_channels, group, bias, mat,
                       relu_slope=None):
        depthwise.forward(im, count, *geometry.args_2d(), weights, out_channels, group, bias,
                          mat, relu_slope)

    @staticmethod
    def direct_backward_data(geometry, mat, count, weights, out_channels, group, im):
        depthwise.backward_data(mat, count, *geometry.args_2d(), weights, out_channels, group,
                                im)

    @staticmethod
    def direct_weight_grad(geometry, im, mat, count, out_channels, group, weight_diff):
        depthwise.weight_grad(im, mat, count, *geometry.args_2d(), out_channels, group,
                              weight_diff)

    @staticmethod
    def direct_backward(geometry, im, mat, count, weights, out_channels, group, weight_diff,
                        im_diff, bias_diff):
        depthwise.backward(im, mat, count, *geometry.args_2d(), weights, out_channels, group,
                           weight_diff, im_diff, bias_diff)

    # --- bias ------------------------------------------------------------------------------
    @staticmethod
    def add_bias(data, num, channels, bias, relu_slope=None):
        if relu_slope is None:
            data.reshape(num, channels, -1)[...] += bias.reshape(1, -1, 1)
        else:
            layout.add_channel_bias_relu(data, num, channels, data.size // max(num * channels, 1),
                                         bias, np.float32(relu_slope))

    @staticmethod
    def bias_grad(diff, num, channels, bias_diff):
        """Image by image, each image's positions in numpy's pairwise order: the numbers of
        ``diff.sum(axis=(0, 2))``."""
        sums = np.zeros(channels, np.float32)
        layout.channel_sums(diff, num, channels, diff.size // max(num * channels, 1), sums)
        bias_diff[...] += sums

    @staticmethod
    def zeros(size):
        return np.zeros(size, np.float32)


class GpuConvBackend:
    """The plan's primitives on flat device arrays (2-d windows: the CUDA im2col is 2-d)."""

    fuses_bias_sums = False  # the bias gradient is two GEMVs (``bias_grad``)
    columns_of = None  # what the column buffer holds: see BaseConvolutionLayer.note_columns

    def __init__(self):
        from pycaffe_cli.cuda import math, memory
        from pycaffe_cli.layers.kernels.cuda import depthwise as device_depthwise
        from pycaffe_cli.layers.kernels.cuda import layout as device_layout
        self._math, self._memory, self._layout = math, memory, device_layout
        self._depthwise = device_depthwise
        self._buffers = {}

    # --- blobs and buffers ---------------------------------------------------------------
    @staticmethod
    def read_data(blob):
        return blob.gpu_data

    @staticmethod
    def write_data(blob):
        return blob.mutable_gpu_data

    @staticmethod
    def read_diff(blob):
        return blob.gpu_diff

    @staticmethod
    def write_diff(blob):
        return blob.mutable_gpu_diff

    def _buffer(self, name, size, value=None):
        """Device buffer ``name`` of at least ``size`` elements (grown, never shrunk), set to
        ``value`` when (re)allocated if one is given."""
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size < size:
            buffer = self._memory.empty(max(size, 1))
            if value is not None:
                self._memory.fill(buffer, value)
            self._buffers[name] = buffer
        return first(buffer, size)

    def col_buffer(self, size):
        return self._buffer("col", size)

    def mat_buffer(self, size):
        return self._buffer("mat", size)

    # --- im2col and layouts --------------------------------------------------------------
    @staticmethod
    def im2col(geometry, im, count, col):
        geometry.gpu_im2col(im, count, col, False)

    @staticmethod
    def col2im(geometry, col, count, im):
        geometry.gpu_col2im(col, count, im, False)

    def to_channels(self, src, count, channels, size, dst, sums=None):
        assert sums is None, "the GPU backend does not fuse the bias sums"
        self._layout.images_to_channels(src, count, channels, size, dst)

    def to_images(self, src, count, channels, size, dst, bias=None, relu_slope=None):
        _no_fused_relu(relu_slope)
        self._layout.channels_to_images(src, count, channels, size, dst, bias)

    # --- GEMMs -----------------------------------------------------------------------------
    def gemm_groups(self, trans_w, weights, x, out, dims):
        g, rows, depth, cols = dims
        w_size = rows * depth
        for i in range(g):
            if trans_w:
                self._math.gemm(True, False, depth, cols, rows, 1.0, starting_at(weights, i * w_size),
                                starting_at(x, i * rows * cols), 0.0, starting_at(out, i * depth * cols))
            else:
                self._math.gemm(False, False, rows, cols, depth, 1.0, starting_at(weights, i * w_size),
                                starting_at(x, i * depth * cols), 0.0, starting_at(out, i * rows * cols))

    def gemm_images(self, trans_w, weights, x, out, count, dims):
        """One grouped GEMM per image on the blob layout (Caffe's 1x1 path)."""
        g, rows, depth, cols = dims
        mat_dim, im_dim = g * rows * cols, g * depth * cols
        x_dim, out_dim = (mat_dim, im_dim) if trans_w else (im_dim, mat_dim)
        for n in range(count):
            self.gemm_groups(trans_w, weights, starting_at(x, n * x_dim), starting_at(out, n * out_dim), dims)

    def weight_grad(self, y, col, weight_diff, dims):
        g, rows, depth, cols = dims
        for i in range(g):
            self._math.gemm(False, True, rows, depth, cols, 1.0, starting_at(y, i * rows * cols),
                            starting_at(col, i * depth * cols), 1.0, starting_at(weight_diff, i * rows * depth))

    # --- direct (depthwise) passes ---------------------------------------------------------
    def direct_forward(self, geometry, im, count, weights, out_channels, group, bias, mat,
                       relu_slope=None):
        if relu_slope is not None:  # fused ReLUs are planned on the CPU only
            raise ValueError("the GPU's direct convolution has no fused ReLU")
        self._depthwise.forward(im, count, *geometry.args_2d(), weights, out_channels, group,
                                bias, mat)

    def direct_backward_data(self, geometry, mat, count, weights, out_channels, group, im):
        self._depthwise.backward_data(mat, count, *geometry.args_2d(), weights, out_channels,
                                      group, im)

    def direct_weight_grad(self, geometry, im, mat, count, out_channels, group, weight_diff):
        self._depthwise.weight_grad(im, mat, count, *geometry.args_2d(), out_channels, group,
                                    weight_diff)

    def direct_backward(self, geometry, im, mat, count, weights, out_channels, group,
                        weight_diff, im_diff, bias_diff):
        """The three gradients, each where its array is given, one kernel after another."""
        if bias_diff is not None:
            self.bias_grad(mat, count, out_channels, bias_diff)
        if weight_diff is not None:
            self.direct_weight_grad(geometry, im, mat, count, out_channels, group, weight_diff)
        if im_diff is not None:
            self.direct_backward_data(geometry, mat, count, weights, out_channels, group,
                                      im_diff)

    # --- bias ------------------------------------------------------------------------------
    def add_bias(self, data, num, channels, bias, relu_slope=None):
        _no_fused_relu(relu_slope)
        self._layout.add_channel_bias(data, num, channels, data.size // (num * channels), bias)

    def bias_grad(self, diff, num, channels, bias_diff):
        """Sums over positions (one GEMV), then over images (a second)."""
        rows = num * channels
        positions = diff.size // max(rows, 1)
        ones = self._buffer("ones", max(positions, num), 1.0)
        sums = self._buffer("sums", rows)
        self._math.gemv(False, rows, positions, 1.0, diff, ones, 0.0, sums)
        self._math.gemv(True, num, channels, 1.0, sums, ones, 1.0, bias_diff)


def _no_fused_relu(relu_slope):
    """The device kernels add the bias without a ReLU: the inference plan fuses it on the CPU
    only (on the GPU the ReLU stays its own kernel)."""
    if relu_slope is not None:
        raise NotImplementedError("the GPU convolution backend does not fuse a ReLU")

