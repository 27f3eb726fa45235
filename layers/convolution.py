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
One plan for both modes: the GEMMs run on the mode's backend (base_convolution_backend.py).
"""
from pycaffe_cli.layers.base import register
from pycaffe_cli.layers.base_convolution import BaseConvolutionLayer
from pycaffe_cli.layers.base_convolution_plan import Plan


@register("Convolution", v1="CONVOLUTION")
class ConvolutionLayer(BaseConvolutionLayer):
    """N-d convolution over the axes after ``convolution_param.axis``."""

    def compute_output_shape(self, in_shape):
        return self.geometry.output_shape(in_shape)

    def forward_with(self, be, bottom, top):
        bias = be.read_data(self.blobs[1]) if self.bias_term else None
        for x, y in zip(bottom, top):
            x_data, y_data = be.read_data(x), be.write_data(y)
            for first, count in self.blocks():
                self.forward_gemm(be, self.im_block(x_data, first, count),
                                  self.mat_block(y_data, first, count), count, bias)
            self.note_columns(be, x)

    def backward_with(self, be, top, propagate_down, bottom):
        weights_down = self.param_propagate_down[0]
        for i, (y, x) in enumerate(zip(top, bottom)):
            # The GEMMs take the top diff as (C_out, count P): where a pass reorders it,
            # block by block, the CPU backend also sums the bias gradient on the way. The
            # DIRECT plan reads the blob layout.
            reorder = self.plan is Plan.GEMM and (
                weights_down or (propagate_down[i] and not self.is_1x1))
            sums = self.bias_sums(be) if reorder else None
            dy = be.read_diff(y)
            if sums is None:
                self.backward_bias(be, dy)
            if not (weights_down or propagate_down[i]):
                continue
            kept = weights_down and self.columns_hold(be, x)
            for first, count in self.blocks():
                dy_block = self.mat_block(dy, first, count)
                dy_transposed = self._to_channels(be, dy_block, count, sums) if reorder \
                    else None
                if weights_down:
                    self.weight_gemm(be, self.im_block(be.read_data(x), first, count), dy_block,
                                     count, dy_transposed, skip_im2col=kept)
                if propagate_down[i]:
                    self.backward_gemm(be, dy_block, self.im_block(be.write_diff(x), first, count),
                                       count, dy_transposed)
            if sums is not None:
                self.add_bias_diff(be, sums)
