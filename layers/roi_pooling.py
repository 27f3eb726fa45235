"""ROIPooling: max pooling over regions of interest (Fast R-CNN's ROIPoolingLayer, from
rbgirshick/caffe-fast-rcnn).

Bottoms: features (N, C, H, W) and ROIs (R, 5) (or any shape of R x 5 values) as rows
(batch index, x1, y1, x2, y2) in image coordinates; ``roi_pooling_param.spatial_scale`` maps
them onto the feature map. Top: (R, C, pooled_h, pooled_w), each bin the maximum of its
window (kernels/cpu/roi.py has the geometry: rounded corners, floor/ceil bins, clipping; an
empty bin gives 0). The argmax of every bin is kept for the backward pass, which routes each
top diff to its argmax element of the features (no gradient to the ROIs).

Deviation: for a malformed ROI (x2' < x1' or y2' < y1' after scaling) the fork's backward
skips the ROI although its forward pooled a window at (x1', y1'); here the gradient follows
the argmax as for any ROI, so it is the derivative of what the forward computed. A batch
index outside [0, N) is refused (the fork's CPU path aborts on it, its GPU path reads out of
bounds).
"""
import numpy as np

from pycaffe_cli.io.foreign import FAST_RCNN
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.kernels.cpu import roi as kernels


def roi_rows(layer, rois_blob, num_images, host):
    """Check the ROI blob: R x 5 values with batch indices in [0, num_images); return R.

    ``host`` is the blob's host data (read for the batch-index check), or None to skip it.
    """
    if rois_blob.num_axes < 1 or rois_blob.count(1) != 5:
        raise layer.error(f"ROIs must have 5 values per ROI (batch index, x1, y1, x2, y2), got "
                          f"shape {rois_blob.shape_string()}")
    if host is not None and host.size:
        batch = host.reshape(-1, 5)[:, 0].astype(np.int64)
        bad = (batch < 0) | (batch >= num_images)
        if bad.any():
            raise layer.error(f"ROI {int(np.argmax(bad))} has batch index {int(batch[bad][0])}, "
                              f"outside the {num_images} image(s) of the features")
    return rois_blob.shape_at(0)


@register("ROIPooling", fork=FAST_RCNN)
class ROIPoolingLayer(Layer):
    """roi_pooling_param: pooled_h, pooled_w (both > 0), spatial_scale (default 1)."""

    exact_num_bottom = 2
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        param = self.param.roi_pooling_param
        if param.pooled_h <= 0 or param.pooled_w <= 0:
            raise self.error(f"roi_pooling_param needs pooled_h > 0 and pooled_w > 0, got "
                             f"{param.pooled_h} and {param.pooled_w}")
        self.pooled = (int(param.pooled_h), int(param.pooled_w))
        self.spatial_scale = np.float32(param.spatial_scale)
        self.argmax = None
        self._gpu_argmax = None

    def reshape(self, bottom, top):
        if bottom[0].num_axes != 4:
            raise self.error(f"features must have 4 axes (num, channels, height, width), got "
                             f"{bottom[0].shape_string()}")
        num_rois = roi_rows(self, bottom[1], bottom[0].num, None)
        shape = (num_rois, bottom[0].channels) + self.pooled
        top[0].reshape(shape)
        if self.argmax is None or self.argmax.shape != shape:
            self.argmax = np.full(shape, -1, np.int32)

    def _rois(self, bottom, device=False):
        roi_rows(self, bottom[1], bottom[0].num, bottom[1].cpu_data)
        count = bottom[1].shape_at(0)
        return (bottom[1].gpu_data if device else bottom[1].data).reshape(count, 5)

    def forward_cpu(self, bottom, top):
        kernels.roi_pool_forward(bottom[0].data, self._rois(bottom), top[0].data, self.argmax,
                                 self.spatial_scale)

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        kernels.roi_pool_backward(top[0].diff, self.argmax, self._rois(bottom),
                                  bottom[0].diff, self.spatial_scale)

    def forward_gpu(self, bottom, top):
        from numba import cuda

        from pycaffe_cli.layers.kernels.cuda import roi as gpu
        shape = top[0].shape
        if self._gpu_argmax is None or self._gpu_argmax.shape != shape:
            self._gpu_argmax = cuda.device_array(shape, np.int32)
        gpu.roi_pool_forward(bottom[0].gpu_data.reshape(bottom[0].shape),
                             self._rois(bottom, device=True),
                             top[0].mutable_gpu_data.reshape(shape), self._gpu_argmax,
                             self.spatial_scale)

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        from pycaffe_cli.layers.kernels.cuda import roi as gpu
        gpu.roi_pool_backward(top[0].gpu_diff.reshape(top[0].shape), self._gpu_argmax,
                              self._rois(bottom, device=True),
                              bottom[0].mutable_gpu_diff.reshape(bottom[0].shape),
                              self.spatial_scale)

    def allow_force_backward(self, bottom_index):
        return bottom_index == 0
