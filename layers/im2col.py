"""Im2col (Caffe's Im2colLayer): the column matrix of every image, as a blob.

With the window of ``convolution_param`` (kernel, pad, stride, dilation per spatial axis) over
a bottom (N, C, *in) the top is (N, C prod(k), *out), out = conv_out_size(in, k, pad, stride,
dilation), and for each image::

    top[(c, k_0, ..., k_{D-1}), o] = x[c, o * stride - pad + k * dilation]   (0 in the padding)

Backward is the adjoint, col2im: each input element sums the top diffs that read it. 2-d
windows also run on the GPU (the CUDA im2col/col2im kernels); N-d ones run their CPU path in
GPU mode (logged once).
"""
import math

from pycaffe_cli import backend
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.convolution.columns import ColumnGeometry
from pycaffe_cli.layers.kernels.geometry import conv_geometry
from pycaffe_cli.layers.views import layer_axis


@register("Im2col", v1="IM2COL")
class Im2colLayer(Layer):
    """Unfold convolution windows along the axes after ``convolution_param.axis``."""

    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.param.convolution_param
        self.channel_axis = layer_axis(self, bottom[0], p.axis)
        self.num_spatial_axes = bottom[0].num_axes - self.channel_axis - 1
        if self.num_spatial_axes < 1:
            raise self.error(f"Im2col needs at least one spatial axis after the channel axis "
                             f"{self.channel_axis}; the bottom is {bottom[0].shape_string()}")
        self.geometry = ColumnGeometry(*conv_geometry(p, self.num_spatial_axes, self.name),
                                       p.force_nd_im2col)

    def reshape(self, bottom, top):
        shape = bottom[0].shape
        first_spatial = self.channel_axis + 1
        if len(shape) != first_spatial + self.num_spatial_axes:
            raise self.error(f"bottom num_axes may not change (was "
                             f"{first_spatial + self.num_spatial_axes}, now "
                             f"{bottom[0].shape_string()})")
        channels = shape[self.channel_axis]
        out_shape = self.geometry.set_image(channels, shape[first_spatial:])
        if any(size <= 0 for size in out_shape):
            raise self.error(f"the window (kernel {self.geometry.kernel}, pad "
                             f"{self.geometry.pad}, dilation {self.geometry.dilation}) does "
                             f"not fit the input {bottom[0].shape_string()}: output size "
                             f"{out_shape}")
        self.num = bottom[0].count(0, self.channel_axis)
        rows = channels * math.prod(self.geometry.kernel)
        top[0].reshape(shape[:self.channel_axis] + (rows,) + out_shape)

    def forward_cpu(self, bottom, top):
        self.geometry.im2col(bottom[0].data.reshape(-1), self.num, top[0].data.reshape(-1),
                             True)

    def backward_cpu(self, top, propagate_down, bottom):
        if propagate_down[0]:
            self.geometry.col2im(top[0].diff.reshape(-1), self.num,
                                 bottom[0].diff.reshape(-1), True)

    def forward_gpu(self, bottom, top):
        if not self._gpu_supported():
            return self.forward_cpu(bottom, top)
        self.geometry.gpu_im2col(bottom[0].gpu_data, self.num, top[0].mutable_gpu_data,
                                 True)

    def backward_gpu(self, top, propagate_down, bottom):
        if not self._gpu_supported():
            return self.backward_cpu(top, propagate_down, bottom)
        if propagate_down[0]:
            self.geometry.gpu_col2im(top[0].gpu_diff, self.num,
                                     bottom[0].mutable_gpu_diff, True)

    def _gpu_supported(self):
        if self.geometry.use_2d:
            return True
        backend.log_once(("cpu-fallback", "Im2col", "nd"),
                         "Im2col layers with N-d windows have no GPU path; running them on "
                         "the CPU")
        return False
