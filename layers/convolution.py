"""Convolution (Caffe's ConvolutionLayer): learned filters slid over the spatial axes.

For each image, with G groups (input channels and outputs split into G independent halves),
weights W (num_output, C / G, k_0, ..., k_{D-1}) and bias b::

    top[m, o] = b[m] + sum_{c in group(m), k} W[m, c, k] x[c, o * stride - pad + k * dilation]

(x is 0 in the padding); the output size per axis is
floor((in + 2 pad - dilation (k - 1) - 1) / stride) + 1. As GEMMs over the im2col matrix
(see base_convolution)::

    forward:   top = W @ im2col(x) + b
    backward:  dW += dtop @ im2col(x)^T,   db += sum dtop,   dx = col2im(W^T @ dtop)

Several bottoms may be given; each is convolved with the same filters into its own top.
On the GPU the same GEMMs run on device buffers (base_convolution_gpu.py).
"""
from pycaffe_cli.layers.base import register
from pycaffe_cli.layers.base_convolution import BaseConvolutionLayer


@register("Convolution", v1="CONVOLUTION")
class ConvolutionLayer(BaseConvolutionLayer):
    """N-d convolution over the axes after ``convolution_param.axis``."""

    def compute_output_shape(self, in_shape):
        return self.geometry.output_shape(in_shape)

    def forward_cpu(self, bottom, top):
        bias = self.blobs[1].data if self.bias_term else None
        for x, y in zip(bottom, top):
            for first, count in self.blocks():
                self.forward_gemm(self.im_block(x.data, first, count),
                                  self.mat_block(y.data, first, count), count, bias)

    def backward_cpu(self, top, propagate_down, bottom):
        for i, (y, x) in enumerate(zip(top, bottom)):
            # The GEMMs take the top diff as (C_out, count P): the pass that reorders it,
            # block by block, also sums the bias gradient.
            reorder = self.param_propagate_down[0] or (propagate_down[i] and not self.is_1x1)
            sums = self.bias_sums() if reorder else None
            if not reorder:
                self.backward_bias(y.diff)
                if not propagate_down[i]:
                    continue
            for first, count in self.blocks():
                dy = self.mat_block(y.diff, first, count)
                dy_transposed = self._mat_transposed(dy, count, sums) if reorder else None
                if self.param_propagate_down[0]:
                    self.weight_gemm(self.im_block(x.data, first, count), dy, count,
                                     dy_transposed)
                if propagate_down[i]:
                    self.backward_gemm(dy, self.im_block(x.diff, first, count), count,
                                       dy_transposed)
            if sums is not None:
                self.add_bias_diff(sums)

    def forward_gpu(self, bottom, top):
        if not self.gpu_supported():
            return self.forward_cpu(bottom, top)
        col, mat = self.gpu_buffers()
        weights = self.blobs[0].gpu_data_for_reading()
        bias = self.blobs[1].gpu_data_for_reading() if self.bias_term else None
        for x, y in zip(bottom, top):
            x_data, y_data = x.gpu_data_for_reading(), y.gpu_data
            for first, count in self.blocks():
                self.gpu_im2col(self.gpu_block(x_data, first, count, self.im_dim), count, col)
                self.gpu_weights_times_col(weights, col, mat, count)
                self.gpu_mat_to_images(mat, count,
                                       self.gpu_block(y_data, first, count, self.mat_dim),
                                       bias)

    def backward_gpu(self, top, propagate_down, bottom):
        if not self.gpu_supported():
            return self.backward_cpu(top, propagate_down, bottom)
        col, mat = self.gpu_buffers()
        weights = self.blobs[0].gpu_data_for_reading()
        for i, (y, x) in enumerate(zip(top, bottom)):
            dy = y.gpu_diff_for_reading()
            self.gpu_bias_grad(dy, self.out_spatial_dim)
            if not (self.param_propagate_down[0] or propagate_down[i]):
                continue
            x_data = x.gpu_data_for_reading()
            dx = x.gpu_diff if propagate_down[i] else None
            for first, count in self.blocks():
                self.gpu_images_to_mat(self.gpu_block(dy, first, count, self.mat_dim), count,
                                       mat)
                if self.param_propagate_down[0]:
                    self.gpu_im2col(self.gpu_block(x_data, first, count, self.im_dim), count,
                                    col)
                    self.gpu_weight_grad(mat, col, count)
                if dx is not None:
                    self.gpu_weights_t_times_mat(weights, mat, col, count)
                    self.gpu_col2im(col, count, self.gpu_block(dx, first, count, self.im_dim))
