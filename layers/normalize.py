"""Normalize: L2 normalisation with a learned scale (SSD's NormalizeLayer, ParseNet's
"L2Norm"), as SSD puts it on VGG's conv4_3.

A bottom of 2 to 4 axes is viewed (N, C, S), S = H * W (missing axes count as 1, as the fork's
legacy accessors do). With ``across_spatial`` the norm is one per sample, over all of C * S
values; without it one per sample and position, over the channels:

    norm = sqrt(sum x^2 + eps)
    y    = scale_c * x / norm          (one scale for every channel when ``channel_shared``)
    dx   = (scale_c * dy - x * sum(scale_c * x * dy) / norm^2) / norm
    dscale_c += sum over n, s of dy * x / norm      (over c too when ``channel_shared``)

The scale blob is shaped (C,), or () when ``channel_shared`` as the fork stores it (so the
fork's caffemodels load). Kernels: kernels/cpu/normalize.py and kernels/cuda/normalize.py.

The bottom gradient is the exact derivative. The fork's leaves the scale out of the dot
product, scale_c * (dy - x * sum(x dy) / norm^2) / norm, which is exact only while every
channel's scale is the same (always with ``channel_shared``, and at the start of SSD's
training from a constant scale_filler of 20); once per-channel scales drift apart, the fork
trains on a wrong gradient. The two agree wherever the fork's is right.

Differences from the fork: the fork computes the scale gradient as sum(dy * y) / scale, which
is NaN for a scale of 0; this computes the same value as sum(dy * x / norm). The fork's GPU
path assigns the shared scale's gradient instead of adding to it (its CPU path adds); both
paths here add, as every Caffe parameter gradient does. In-place use is refused: backward
needs the input. Sums are taken in float64.
"""
import numpy as np

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda import memory
from pycaffe_cli.fillers import fill
from pycaffe_cli.io.foreign import SSD
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.kernels.cpu import normalize as kernels
from pycaffe_cli.proto import caffe_pb2


@register("Normalize", fork=SSD)
class NormalizeLayer(Layer):
    """norm_param: across_spatial (default true), channel_shared (default true),
    scale_filler (default constant 1), eps (default 1e-10)."""

    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        param = self.param.norm_param
        self._check_axes(bottom[0])
        self.across_spatial = param.across_spatial
        self.channel_shared = param.channel_shared
        self.eps = float(np.float32(param.eps))
        channels = bottom[0].channels
        if not self.blobs:
            self.blobs = [Blob(() if self.channel_shared else (channels,))]
            filler = (param.scale_filler if param.HasField("scale_filler")
                      else caffe_pb2.FillerParameter(type="constant", value=1.0))
            # fill a 1-axis twin: the fillers' fan computations need at least one axis
            twin = Blob((self.blobs[0].count(),))
            fill(twin, filler, self.name)
            self.blobs[0].flat_data[:] = twin.flat_data
        wanted = 1 if self.channel_shared else channels
        if self.blobs[0].count() != wanted:
            raise self.error(f"Scale size is inconsistent with prototxt config: the scale "
                             f"blob has {self.blobs[0].count()} value(s), "
                             + ("channel_shared needs 1" if self.channel_shared else
                                f"the bottom {bottom[0].shape_string()} has {channels} "
                                "channels"))
        self.param_propagate_down = [True]
        self._norm = None
        self._partials = None
        self._scaled = Blob()
        self._one = Blob((1,))  # backward's kernel takes dy already scaled
        self._one.data[...] = 1

    def _check_axes(self, blob):
        if not 2 <= blob.num_axes <= 4:
            raise self.error(f"the bottom must have 2 to 4 axes (num, channels, height, "
                             f"width), got {blob.shape_string()}")

    def reshape(self, bottom, top):
        source = bottom[0]
        self._check_axes(source)
        if top[0] is source:
            raise self.error("Normalize layer does not allow in-place computation")
        if not self.channel_shared and source.channels != self.blobs[0].count():
            raise self.error(f"the bottom {source.shape_string()} has {source.channels} "
                             f"channels, the scale {self.blobs[0].count()}")
        top[0].reshape_like(source)
        num, channels, inner = self._geometry(source)
        norm_shape = (num, 1) if self.across_spatial else (num, inner)
        if self._norm is None or self._norm[0].shape != norm_shape:
            # the norms (kept for backward) and the dots of backward
            self._norm = [Blob(norm_shape), Blob(norm_shape)]
        self._scaled.reshape_like(source)  # scale_c * dy, for backward

    @staticmethod
    def _geometry(blob):
        """(N, C, S) of the bottom's view."""
        return blob.num, blob.channels, blob.height * blob.width

    # --- CPU ---------------------------------------------------------------------------------
    def forward_cpu(self, bottom, top):
        shape = self._geometry(bottom[0])
        x = bottom[0].data.reshape(shape)
        norm = self._norm[0].data
        kernels.norms(x, self.eps, norm)
        kernels.normalize_forward(x, norm, self.blobs[0].flat_data, top[0].data.reshape(shape))

    def backward_cpu(self, top, propagate_down, bottom):
        shape = self._geometry(bottom[0])
        x = bottom[0].data.reshape(shape)
        dy = top[0].diff.reshape(shape)
        norm = self._norm[0].data
        scale = self.blobs[0]
        if self.param_propagate_down[0]:
            gradient = np.empty(scale.count(), np.float32)
            kernels.scale_gradient(x, dy, norm, gradient)
            scale.flat_diff[:] += gradient
        if propagate_down[0]:
            scaled = self._scaled.data.reshape(shape)
            np.multiply(dy, self._channel_scales(scale.flat_data), out=scaled)
            dots = self._norm[1].data
            kernels.sums_of_products(x, scaled, dots)
            kernels.normalize_backward(x, scaled, norm, dots, self._one.data,
                                       bottom[0].diff.reshape(shape))

    def _channel_scales(self, values):
        return values[0] if self.channel_shared else values.reshape(1, -1, 1)

    # --- GPU ---------------------------------------------------------------------------------
    def _gpu_partials(self, num, channels):
        """A float64 device scratch of N * C values (the per-(n, c) partial sums)."""
        if self._partials is None or self._partials.size < max(num * channels, 1):
            self._partials = memory.empty(max(num * channels, 1), np.float64)
        return self._partials

    def forward_gpu(self, bottom, top):
        from pycaffe_cli.layers.kernels.cuda import normalize as gpu
        num, channels, inner = self._geometry(bottom[0])
        if bottom[0].count() == 0:
            return
        x = bottom[0].gpu_data
        norm = self._norm[0].mutable_gpu_data
        per_position = not self.across_spatial
        gpu.norms(x, num, channels, inner, self.eps, per_position,
                  self._gpu_partials(num, channels), norm)
        gpu.normalize_forward(x, norm, self.blobs[0].gpu_data, channels, inner, per_position,
                              top[0].mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        from pycaffe_cli.layers.kernels.cuda import normalize as gpu
        num, channels, inner = self._geometry(bottom[0])
        if bottom[0].count() == 0:
            return
        x = bottom[0].gpu_data
        dy = top[0].gpu_diff
        norm = self._norm[0].gpu_data
        per_position = not self.across_spatial
        partials = self._gpu_partials(num, channels)
        if self.param_propagate_down[0]:
            gpu.accumulate_scale_gradient(x, dy, norm, num, channels, inner, per_position,
                                          partials, self.blobs[0].mutable_gpu_diff)
        if propagate_down[0]:
            dots = self._norm[1].mutable_gpu_data
            scaled = self._scaled.mutable_gpu_data
            gpu.scale_channels(dy, self.blobs[0].gpu_data, channels, inner, scaled)
            gpu.sums_of_products(x, scaled, num, channels, inner, per_position, partials, dots)
            gpu.normalize_backward(x, scaled, norm, dots, self._one.gpu_data, channels, inner,
                                   per_position, bottom[0].mutable_gpu_diff)
