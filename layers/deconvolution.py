"""Deconvolution (Caffe's DeconvolutionLayer): the transpose (adjoint) of Convolution.

Forward is Convolution's backward-data pass and backward its forward pass, with weights
W (C, num_output / G, k_0, ..., k_{D-1}) for C input channels and G groups::

    forward:   top = col2im(W^T @ x) + b
    backward:  dW += x @ im2col(dtop)^T,   db += sum dtop,   dx = W @ im2col(dtop)

Each output axis has size stride (in - 1) + dilation (k - 1) + 1 - 2 pad. On the GPU the
same GEMMs run on device buffers (base_convolution_gpu.py).
"""
from pycaffe_cli.layers.base import register
from pycaffe_cli.layers.base_convolution import BaseConvolutionLayer


@register("Deconvolution", v1="DECONVOLUTION")
class DeconvolutionLayer(BaseConvolutionLayer):
    """N-d transposed convolution over the axes after ``convolution_param.axis``."""

    reverse_dimensions = True

    def compute_output_shape(self, in_shape):
        g = self.geometry
        return tuple(s * (size - 1) + d * (k - 1) + 1 - 2 * p for size, k, p, s, d in
                     zip(in_shape, g.kernel, g.pad, g.stride, g.dilation))

    def forward_cpu(self, bottom, top):
        for x, y in zip(bottom, top):
            for first, count in self.blocks():
                self.backward_gemm(self.mat_block(x.data, first, count),
                                   self.im_block(y.data, first, count), count)
            if self.bias_term:
                y.data.reshape(self.num, self.num_output, -1)[...] += \
                    self.blobs[1].data.reshape(1, -1, 1)

    def backward_cpu(self, top, propagate_down, bottom):
        for i, (y, x) in enumerate(zip(top, bottom)):
            self.backward_bias(y.diff)
            if not (self.param_propagate_down[0] or propagate_down[i]):
                continue
            for first, count in self.blocks():
                dy = self.im_block(y.diff, first, count)
                if self.param_propagate_down[0]:
                    self.weight_gemm(dy, self.mat_block(x.data, first, count), count)
                if propagate_down[i]:
                    self.forward_gemm(dy, self.mat_block(x.diff, first, count), count,
                                      skip_im2col=self.param_propagate_down[0])

    def forward_gpu(self, bottom, top):
        if not self.gpu_supported():
            return self.forward_cpu(bottom, top)
        col, mat = self.gpu_buffers()
        weights = self.blobs[0].gpu_data_for_reading()
        for x, y in zip(bottom, top):
            x_data, y_data = x.gpu_data_for_reading(), y.gpu_data
            for first, count in self.blocks():
                self.gpu_images_to_mat(self.gpu_block(x_data, first, count, self.mat_dim),
                                       count, mat)
                self.gpu_weights_t_times_mat(weights, mat, col, count)
                self.gpu_col2im(col, count, self.gpu_block(y_data, first, count, self.im_dim))
            if self.bias_term:
                self._add_bias(y_data)

    def _add_bias(self, y_data):
        from pycaffe_cli.layers.kernels.cuda import layout
        layout.add_channel_bias(y_data, self.num, self.num_output,
                                self.im_dim // self.num_output,
                                self.blobs[1].gpu_data_for_reading())

    def backward_gpu(self, top, propagate_down, bottom):
        if not self.gpu_supported():
            return self.backward_cpu(top, propagate_down, bottom)
        col, mat = self.gpu_buffers()
        weights = self.blobs[0].gpu_data_for_reading()
        for i, (y, x) in enumerate(zip(top, bottom)):
            dy = y.gpu_diff_for_reading()
            self.gpu_bias_grad(dy, self.im_dim // self.num_output)
            if not (self.param_propagate_down[0] or propagate_down[i]):
                continue
            x_data = x.gpu_data_for_reading()
            dx = x.gpu_diff if propagate_down[i] else None
            for first, count in self.blocks():
                self.gpu_im2col(self.gpu_block(dy, first, count, self.im_dim), count, col)
                if self.param_propagate_down[0]:
                    self.gpu_images_to_mat(self.gpu_block(x_data, first, count, self.mat_dim),
                                           count, mat)
                    self.gpu_weight_grad(mat, col, count)
                if dx is not None:
                    self.gpu_weights_times_col(weights, col, mat, count)
                    self.gpu_mat_to_images(mat, count,
                                           self.gpu_block(dx, first, count, self.mat_dim))
