"""PSROIPooling: position-sensitive average pooling over regions of interest (R-FCN's
PSROIPoolingLayer, daijifeng001/caffe-rfcn).

Bottoms: score maps (N, output_dim * group_size^2, H, W) and ROIs (R x 5 values: batch
index, x1, y1, x2, y2, image coordinates). Top: (R, output_dim, group_size, group_size):
bin (ph, pw) of output k averages its window of channel (k * group_size + ph) * group_size
+ pw (kernels/cpu/roi.py has the geometry: rounded corners, the end corner + 1, floor/ceil
bins, clipping; an empty bin gives 0). That channel is kept per top element (the fork's
mapping_channel, here ``mapping``). Backward spreads each top diff / bin area over its
window (no gradient to the ROIs).

The fork runs this layer on the GPU only (its CPU backward is NOT_IMPLEMENTED); the CPU path
here is the same maths. Its GPU backward scatters with atomic adds; ours gathers, adding
the ROIs in order, so CPU and GPU sums agree. A batch index outside [0, N) is refused (the
fork reads out of bounds).
"""
import numpy as np

from pycaffe_cli.io.foreign import RFCN
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.kernels.cpu import roi as kernels
from pycaffe_cli.layers.roi_pooling import roi_rows


@register("PSROIPooling", fork=RFCN)
class PSROIPoolingLayer(Layer):
    """psroi_pooling_param: spatial_scale, output_dim > 0, group_size > 0 (all required)."""

    exact_num_bottom = 2
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        param = self.param.psroi_pooling_param
        if param.output_dim <= 0 or param.group_size <= 0:
            raise self.error(f"psroi_pooling_param needs output_dim > 0 and group_size > 0, "
                             f"got {param.output_dim} and {param.group_size}")
        self.output_dim = int(param.output_dim)
        self.group_size = int(param.group_size)
        self.spatial_scale = np.float32(param.spatial_scale)
        self.mapping = None
        self._gpu_mapping = None

    def reshape(self, bottom, top):
        if bottom[0].num_axes != 4:
            raise self.error(f"score maps must have 4 axes (num, channels, height, width), "
                             f"got {bottom[0].shape_string()}")
        wanted = self.output_dim * self.group_size ** 2
        if bottom[0].channels != wanted:
            raise self.error(f"the score maps have {bottom[0].channels} channels; output_dim "
                             f"{self.output_dim} x group_size^2 {self.group_size ** 2} needs "
                             f"{wanted}")
        num_rois = roi_rows(self, bottom[1], bottom[0].num, None)
        shape = (num_rois, self.output_dim, self.group_size, self.group_size)
        top[0].reshape(shape)
        if self.mapping is None or self.mapping.shape != shape:
            self.mapping = np.full(shape, -1, np.int32)

    def _rois(self, bottom, device=False):
        roi_rows(self, bottom[1], bottom[0].num, bottom[1].cpu_data)
        count = bottom[1].shape_at(0)
        return (bottom[1].gpu_data if device else bottom[1].data).reshape(count, 5)

    def forward_cpu(self, bottom, top):
        kernels.psroi_pool_forward(bottom[0].data, self._rois(bottom), top[0].data,
                                   self.mapping, self.spatial_scale, self.group_size)

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        kernels.psroi_pool_backward(top[0].diff, self._rois(bottom), bottom[0].diff,
                                    self.spatial_scale, self.group_size)

    def forward_gpu(self, bottom, top):
        from numba import cuda

        from pycaffe_cli.layers.kernels.cuda import roi as gpu
        shape = top[0].shape
        if self._gpu_mapping is None or self._gpu_mapping.shape != shape:
            self._gpu_mapping = cuda.device_array(shape, np.int32)
        gpu.psroi_pool_forward(bottom[0].gpu_data.reshape(bottom[0].shape),
                               self._rois(bottom, device=True),
                               top[0].mutable_gpu_data.reshape(shape), self._gpu_mapping,
                               self.spatial_scale, self.group_size)

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        from pycaffe_cli.layers.kernels.cuda import roi as gpu
        gpu.psroi_pool_backward(top[0].gpu_diff.reshape(top[0].shape),
                                self._rois(bottom, device=True),
                                bottom[0].mutable_gpu_diff.reshape(bottom[0].shape),
                                self.spatial_scale, self.group_size)

    def allow_force_backward(self, bottom_index):
        return bottom_index == 0
