"""Deconvolution (Caffe's DeconvolutionLayer): the transpose (adjoint) of Convolution.

Forward is Convolution's backward-data pass and backward its forward pass, with weights
W (C, num_output / G, k_0, ..., k_{D-1}) for C input channels and G groups::

    forward:   top = col2im(W^T @ x) + b
    backward:  dW += x @ im2col(dtop)^T,   db += sum dtop,   dx = W @ im2col(dtop)

Each output axis has size stride (in - 1) + dilation (k - 1) + 1 - 2 pad.
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
