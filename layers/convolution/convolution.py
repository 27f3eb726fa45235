"""Convolution (Caffe's ConvolutionLayer): learned filters slid over the spatial axes.

For each image, with G groups (input channels and outputs split into G independent halves),
weights W (num_output, C / G, k_0, ..., k_{D-1}) and bias b::

    top[m, o] = b[m] + sum_{c in group(m), k} W[m, c, k] x[c, o * stride - pad + k * dilation]

(x is 0 in the padding); the output size per axis is
floor((in + 2 pad - dilation (k - 1) - 1) / stride) + 1. As GEMMs over the im2col matrix
(see base.py)::

    forward:   top = W @ im2col(x) + b
    backward:  dW += dtop @ im2col(x)^T,   db += sum dtop,   dx = col2im(W^T @ dtop)

Several bottoms may be given; each is convolved with the same filters into its own top.
One plan for both modes: the GEMMs run on the mode's backend (backend.py). The inference
plan's forward-only pass may run 3x3 layers as Winograd F(4x4, 3x3) instead, on the CPU
(``WinogradInferenceHooks``).
"""
import math

import numba
import numpy as np

from pycaffe_cli import backend
from pycaffe_cli.layers.base import register
from pycaffe_cli.layers.convolution import plan as rules
from pycaffe_cli.layers.convolution.base import COL_BUFFER_LIMIT, BaseConvolutionLayer, \
    ConvolutionInferenceHooks
from pycaffe_cli.layers.convolution.plan import Plan
from pycaffe_cli.layers.inference_hooks import SpecialPath
from pycaffe_cli.layers.kernels.cpu import conv_image, winograd, winograd_error, winograd_image
from pycaffe_cli.layers.kernels.cpu.layout import NO_BIAS
from pycaffe_cli.synced_memory import data_stamps

WINOGRAD = SpecialPath("winograd", "Winograd F(4x4, 3x3)")
# In the forward-only pass at batch > 1, layers with at least this many output positions an
# image (and a window to unfold) run image by image through conv_image, as at batch 1:
# there one image's product is wide enough for BLAS's rate, and the batch's column matrix,
# which outgrows the caches, and its reorder into the image layout cost more than batching
# gains (docs/kernel-choices.md, "One image's convolutions").
IMAGE_BY_IMAGE_MIN_POSITIONS = 2048


class WinogradInferenceHooks(ConvolutionInferenceHooks):
    """The family's hooks, and on the CPU, layers with a ``winograd_block`` run Winograd
    F(4x4, 3x3) (kernels/cpu/winograd.py) where its error bound allows
    (kernels/cpu/winograd_error.py). Training and plain forwards keep the GEMMs."""

    def forward_pass(self):
        layer = self.layer
        if layer._use_gpu("forward"):
            return layer.forward_pass()
        return layer._forward_inference_cpu

    def runs_winograd(self):
        """Whether the forward-only pass runs Winograd with the current weights."""
        return bool(self.layer.winograd_block) and self.layer._winograd_weights() is not None

    def special_path(self):
        return WINOGRAD if self.runs_winograd() else None

    def forget_weight_transforms(self):
        self.layer._winograd_key = None


@register("Convolution", v1="CONVOLUTION")
class ConvolutionLayer(BaseConvolutionLayer):
    """N-d convolution over the axes after ``convolution_param.axis``."""

    inference_hooks = WinogradInferenceHooks

    def compute_output_shape(self, in_shape):
        return self.geometry.output_shape(in_shape)

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        # Its scratch arrays grow at the first inference pass: a net that only trains, or
        # runs plain forwards, never allocates them.
        self.winograd_block = self._winograd_block()

    def _winograd_block(self):
        """Tiles per block of the inference pass's Winograd F(4x4, 3x3) (0: not used): 3x3
        windows, stride 1, no dilation, one group, in CPU mode, where ``plan.winograd_fits``
        says so (looked up in its module at every call, so a test can replace the rule); as
        many tiles as keep its two scratch arrays within COL_BUFFER_LIMIT."""
        g = self.geometry
        plain_3x3 = (g.use_2d and g.kernel == (3, 3) and g.stride == (1, 1)
                     and g.dilation == (1, 1) and self.group == 1)
        if not plain_3x3 or backend.mode() is not backend.Mode.CPU:
            return 0
        tiles = self.num * math.prod(winograd.tile_counts(*g.out_shape))
        if not rules.winograd_fits(self.channels, tiles):
            return 0
        per_tile = winograd.POINTS * (self.channels + self.num_output)
        return max(1, min(tiles, COL_BUFFER_LIMIT // per_tile))

    def _forward_inference_cpu(self, bottom, top):
        """The forward-only pass on the CPU: Winograd where the layer has a
        ``winograd_block`` and its weights' transform fits, else ``forward_cpu``."""
        weights = self._winograd_weights() if self.winograd_block else None
        if weights is None:
            if self._one_image_blocks():
                self._forward_one_image(bottom, top)
            else:
                self.forward_cpu(bottom, top)
            return
        if self.num == 1:
            self._winograd_one_image(bottom, top, weights)
            return
        be = self.cpu_backend
        bias = self.blobs[1].cpu_data if self.bias_term else None
        (height, width), (pad_h, pad_w) = self.geometry.im_shape, self.geometry.pad
        block = self.winograd_block
        v = be.col_buffer(winograd.POINTS * self.channels * block)
        m = be.mat_buffer(winograd.POINTS * self.num_output * block)
        be.columns_of = None  # the column buffer now holds Winograd's scratch
        for x, y in zip(bottom, top):
            winograd.forward(x.flat_data, self.num, self.channels, height, width, pad_h,
                             pad_w, weights, self.num_output, bias, self._fused_relu_slope,
                             y.flat_data, v, m, block)

    def _one_image_blocks(self):
        """Whether the forward-only pass runs conv_image's blocks, image by image: the GEMM
        plan, one group, 2-d windows, and one image, or images of at least
        IMAGE_BY_IMAGE_MIN_POSITIONS output positions with a window to unfold."""
        one_by_one = self.num == 1 or (not self.is_1x1 and self.out_spatial_dim
                                       >= IMAGE_BY_IMAGE_MIN_POSITIONS)
        return (one_by_one and self.plan is Plan.GEMM and self.group == 1
                and self.geometry.use_2d)

    def _forward_one_image(self, bottom, top):
        """Image by image, each block of its product from unfolding to bias on one thread
        (kernels/cpu/conv_image.py)."""
        be, geometry = self.cpu_backend, self.geometry.args_2d()
        workers = numba.get_num_threads()
        col = be.col_buffer(conv_image.scratch_size(*geometry, self.num_output, workers))
        be.columns_of = None  # the column buffer holds only parts of the columns
        bias, has_bias, slope = self._bias_and_relu()
        weights = self.blobs[0].cpu_data.reshape(-1)
        for x, y in zip(bottom, top):
            conv_image.forward(x.flat_data, self.num, *geometry, weights, self.num_output,
                               bias, has_bias, np.float32(slope or 0), slope is not None, col,
                               y.flat_data, workers)

    def _winograd_one_image(self, bottom, top, weights):
        """One image's Winograd, each block from input to output transform on one thread
        (kernels/cpu/winograd_image.py)."""
        be, workers = self.cpu_backend, numba.get_num_threads()
        geometry = (self.channels, *self.geometry.im_shape, *self.geometry.pad)
        v_size, m_size = winograd_image.scratch_sizes(*geometry, self.num_output, workers)
        v, m = be.col_buffer(v_size), be.mat_buffer(m_size)
        be.columns_of = None  # the column buffer now holds Winograd's scratch
        bias, has_bias, slope = self._bias_and_relu()
        for x, y in zip(bottom, top):
            winograd_image.forward(x.flat_data, *geometry, weights, self.num_output, bias,
                                   has_bias, np.float32(slope or 0), slope is not None,
                                   y.flat_data, v, m, workers)

    def _bias_and_relu(self):
        """(bias or a placeholder, whether there is one, the fused ReLU's slope or None)."""
        if not self.bias_term:
            return NO_BIAS, False, None
        return self.blobs[1].cpu_data, True, self._fused_relu_slope

    def _winograd_weights(self):
        """The weights' Winograd transform, or None where its error bound is too far above
        the GEMM's for these weights (``winograd_error.fits``, looked up in its module);
        recomputed after their blob was written or given other memory (``data_stamps``), or
        the hooks' ``forget_weight_transforms``."""
        key = data_stamps(self.blobs[:1])
        if getattr(self, "_winograd_key", None) != key:
            weights = self.blobs[0].cpu_data
            u = winograd.transform_weights(weights)
            fits = winograd_error.fits(u, weights)
            self._winograd_u = u if fits else None
            self._winograd_key = key
        return self._winograd_u

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
            if self.plan is Plan.DIRECT:
                self._backward_direct(be, y, x, propagate_down[i])
                continue
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

    def _backward_direct(self, be, y, x, data_down):
        """The DIRECT plan's gradients (weights, bias, bottom: each where wanted) in one pass
        over the top diff, the whole batch at once."""
        weights_down = self.param_propagate_down[0]
        bias_down = self.bias_term and self.param_propagate_down[1]
        if not (weights_down or bias_down or data_down):
            return
        be.direct_backward(self.geometry, be.read_data(x) if weights_down else None,
                           be.read_diff(y), self.num,
                           be.read_data(self.blobs[0]) if data_down else None,
                           self.conv_out_channels, self.group,
                           be.write_diff(self.blobs[0]) if weights_down else None,
                           be.write_diff(x) if data_down else None,
                           be.write_diff(self.blobs[1]) if bias_down else None)
