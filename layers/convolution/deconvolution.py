"""Deconvolution (Caffe's DeconvolutionLayer): the transpose (adjoint) of Convolution.

Forward is Convolution's backward-data pass and backward its forward pass, with weights
W (C, num_output / G, k_0, ..., k_{D-1}) for C input channels and G groups::

    forward:   top = col2im(W^T @ x) + b
    backward:  dW += x @ im2col(dtop)^T,   db += sum dtop,   dx = W @ im2col(dtop)

Each output axis has size stride (in - 1) + dilation (k - 1) + 1 - 2 pad. One plan for both
modes: the GEMMs run on the mode's backend (backend.py).
"""
from pycaffe_cli.layers.base import register
from pycaffe_cli.layers.convolution.base import BaseConvolutionLayer


@register("Deconvolution", v1="DECONVOLUTION")
class DeconvolutionLayer(BaseConvolutionLayer):
    """N-d transposed convolution over the axes after ``convolution_param.axis``."""

    reverse_dimensions = True

    def compute_output_shape(self, in_shape):
        g = self.geometry
        return tuple(s * (size - 1) + d * (k - 1) + 1 - 2 * p for size, k, p, s, d in
                     zip(in_shape, g.kernel, g.pad, g.stride, g.dilation))

    def forward_with(self, be, bottom, top):
        for x, y in zip(bottom, top):
            x_data, y_data = be.read_data(x), be.write_data(y)
            for first, count in self.blocks():
                self.backward_gemm(be, self.mat_block(x_data, first, count),
                                   self.im_block(y_data, first, count), count)
            if self.bias_term:
                be.add_bias(y_data, self.num, self.num_output, be.read_data(self.blobs[1]),
                            self._fused_relu_slope)

    def backward_with(self, be, top, propagate_down, bottom):
        weights_down = self.param_propagate_down[0]
        for i, (y, x) in enumerate(zip(top, bottom)):
            dy = be.read_diff(y)
            self.backward_bias(be, dy)
            if not (weights_down or propagate_down[i]):
                continue
            for first, count in self.blocks():
                dy_block = self.im_block(dy, first, count)
                if weights_down:
                    self.weight_gemm(be, dy_block, self.mat_block(be.read_data(x), first, count),
                                     count)
                if propagate_down[i]:
                    self.forward_gemm(be, dy_block, self.mat_block(be.write_diff(x), first, count),
                                      count, skip_im2col=weights_down)
