"""The GEMMs of (de)convolution on the GPU (mixed into BaseConvolutionLayer).

The same plan as the CPU path (base_convolution.py), on device buffers: a block of images is
unfolded by one im2col kernel into the column matrix (C k..., count, P), each group is ONE
cuBLAS GEMM over the whole block, and layout kernels move the output side between the GEMM
layout (C_out, count, P) and the blob layout (count, C_out, P), adding the bias on the way
out. The bias gradient is two GEMVs against a vector of ones (positions, then images).
Blocks of images keep the column buffer under COL_BUFFER_LIMIT, as on the CPU; no loop runs
per image.

2-d windows only: N-d convolutions (or force_nd_im2col) run their CPU path, logged once.
"""
import numpy as np

from pycaffe_cli import backend
from pycaffe_cli.blob import Blob


def _kernels():
    from pycaffe_cli.layers.kernels.cuda import layout, math, memory
    return layout, math, memory


class ConvolutionGpuGemms:
    """GPU twins of forward_gemm / backward_gemm / weight_gemm / backward_bias."""

    def gpu_supported(self):
        """True when the window is 2-d (the CUDA im2col is 2-d); else logs the fallback."""
        if self.geometry.use_2d:
            return True
        backend.log_once(("cpu-fallback", self.type, "nd"),
                         f"{self.type} layers with {self.num_spatial_axes} spatial axes (or "
                         "force_nd_im2col) have no GPU path; running them on the CPU")
        return False

    def gpu_buffers(self):
        """Device column / GEMM-output buffers for one block (grown, never shrunk)."""
        if not hasattr(self, "_gpu_col"):
            self._gpu_col, self._gpu_mat = Blob((0,)), Blob((0,))
            self._gpu_ones, self._gpu_sums = Blob((0,)), Blob((0,))
        col = self.kernel_dim * self.group * self.out_spatial_dim * self.block
        for blob, size in ((self._gpu_col, col), (self._gpu_mat, self.mat_dim * self.block)):
            if blob.count() < size:
                blob.reshape((size,))
        return self._gpu_col.gpu_data, self._gpu_mat.gpu_data

    def gpu_im2col(self, im, count, col):
        """col (C k..., count, P) = im2col of ``count`` flat input images on the device."""
        self.geometry.gpu_im2col(im, count, col[:self._col_size(count)], False)

    def gpu_col2im(self, col, count, im):
        self.geometry.gpu_col2im(col[:self._col_size(count)], count, im, False)

    def _col_size(self, count):
        return self.kernel_dim * self.group * self.out_spatial_dim * count

    def _group_sizes(self, count):
        out_g = self.conv_out_channels // self.group
        return out_g, self.kernel_dim, count * self.out_spatial_dim

    def gpu_weights_times_col(self, weights, col, mat, count):
        """mat (C_out, count P) = W_g @ col_g for every group g."""
        _, math, _ = _kernels()
        rows, depth, cols = self._group_sizes(count)
        for g in range(self.group):
            math.gemm(False, False, rows, cols, depth, 1.0, weights[g * rows * depth:],
                      col[g * depth * cols:], 0.0, mat[g * rows * cols:])

    def gpu_weights_t_times_mat(self, weights, mat, col, count):
        """col (C k..., count P) = W_g^T @ mat_g for every group g."""
        _, math, _ = _kernels()
        rows, depth, cols = self._group_sizes(count)
        for g in range(self.group):
            math.gemm(True, False, depth, cols, rows, 1.0, weights[g * rows * depth:],
                      mat[g * rows * cols:], 0.0, col[g * depth * cols:])

    def gpu_weight_grad(self, mat, col, count):
        """dW_g += mat_g @ col_g^T for every group g."""
        _, math, _ = _kernels()
        rows, depth, cols = self._group_sizes(count)
        weight_diff = self.blobs[0].gpu_diff
        for g in range(self.group):
            math.gemm(False, True, rows, depth, cols, 1.0, mat[g * rows * cols:],
                      col[g * depth * cols:], 1.0, weight_diff[g * rows * depth:])

    def gpu_mat_to_images(self, mat, count, dst, bias=None):
        layout, _, _ = _kernels()
        layout.channels_to_images(mat, count, self.conv_out_channels, self.out_spatial_dim,
                                  dst, bias)

    def gpu_images_to_mat(self, src, count, mat):
        layout, _, _ = _kernels()
        layout.images_to_channels(src, count, self.conv_out_channels, self.out_spatial_dim,
                                  mat)

    def gpu_bias_grad(self, diff, positions):
        """db += ``diff`` (num, num_output, positions) summed over images and positions."""
        if not (self.bias_term and self.param_propagate_down[1]):
            return
        _, math, _ = _kernels()
        rows = self.num * self.num_output
        ones = self._ones(max(positions, self.num))
        if self._gpu_sums.count() < rows:
            self._gpu_sums.reshape((rows,))
        sums = self._gpu_sums.gpu_data
        math.gemv(False, rows, positions, 1.0, diff, ones, 0.0, sums)
        math.gemv(True, self.num, self.num_output, 1.0, sums, ones, 1.0,
                  self.blobs[1].gpu_diff)

    def _ones(self, size):
        if self._gpu_ones.count() < size:
            self._gpu_ones.reshape((size,))
            self._gpu_ones.data[...] = np.float32(1)
        return self._gpu_ones.gpu_data_for_reading()

    def gpu_block(self, array, first, count, dim):
        """Flat device view of images [first, first + count) of a flat array."""
        return array[first * dim:(first + count) * dim]
