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
