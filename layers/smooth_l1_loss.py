"""SmoothL1Loss: the box-regression loss of Fast/Faster R-CNN (rbgirshick/caffe-fast-rcnn's
SmoothL1LossLayer), also the type name of SSD's and R-FCN's variants.

With s2 = smooth_l1_loss_param.sigma^2 (default 1), d = w_in * (pred - target) and
f(d) = 0.5 s2 d^2 if |d| < 1 / s2, else |d| - 0.5 / s2:

    loss = sum(w_out * f(d)) / normalizer
    dpred = +loss_weight / normalizer * f'(d) [* w_in * w_out],   dtarget = -(the same)

Bottoms, so that prototxts of all three forks run:

* 2 (pred, target): no weights.
* 3 (pred, target, weights): SSD's and R-FCN's form, the weights as w_in (w_out = 1). Like
  those forks, backward does NOT multiply f'(d) by the weights: the exact gradient for 0/1
  weights (their use), not for others.
* 4 (pred, target, inside_weights, outside_weights): Fast R-CNN's form; backward multiplies
  f'(d) by w_in * w_out, the exact gradient.

Every bottom has pred's shape (same num and per-item count). The normalizer is num, as in
Fast R-CNN and SSD, unless loss_param sets ``normalization`` (or the legacy ``normalize``):
then R-FCN's rule, with inner = the count per channel (height * width): FULL and VALID
num * inner, BATCH_SIZE num, NONE 1, PRE_FIXED loss_param.pre_fixed_normalizer, at least 1.
(R-FCN's caffe-rfcn applies its rule even when loss_param is unset, i.e. VALID: pycaffe
keeps Fast R-CNN's num there; the two agree for (num, channels) and (num, channels, 1, 1)
blobs. A caffe-rfcn RPN loss over (N, C, H, W) maps writes ``loss_param { normalization:
VALID }`` to get that fork's numbers.) An optional second top (R-FCN) receives the
per-instance loss, w_out * f(d) summed over channels, shaped (num, 1, inner...). Gradients
go to pred and target (opposite signs), none to the weights.
"""
import numpy as np

from pycaffe_cli.blob import Blob
from pycaffe_cli.io.foreign import FAST_RCNN
from pycaffe_cli.layers.base import LossLayer, register
from pycaffe_cli.layers.kernels.cpu import smooth_l1 as kernels
from pycaffe_cli.layers.softmax_with_loss import loss_normalization, normalizer


@register("SmoothL1Loss", fork=FAST_RCNN)
class SmoothL1LossLayer(LossLayer):
    """smooth_l1_loss_param: sigma (default 1); loss_param: normalization, as above."""

    exact_num_bottom = None
    min_num_bottom = 2
    max_num_bottom = 4
    exact_num_top = None
    min_num_top = 1
    max_num_top = 2

    def layer_setup(self, bottom, top):
        sigma = np.float32(self.param.smooth_l1_loss_param.sigma)
        self.sigma2 = np.float32(sigma * sigma)
        if not self.sigma2 > 0:
            raise self.error(f"smooth_l1_loss_param.sigma must not be 0, got {sigma}")
        loss_param = self.param.loss_param
        self.normalization = None
        if loss_param.HasField("normalization") or loss_param.HasField("normalize"):
            self.normalization = loss_normalization(loss_param)
        self.pre_fixed = loss_param.pre_fixed_normalizer
        self.has_inside = len(bottom) >= 3
        self.has_outside = len(bottom) == 4
        self.diff = Blob()     # d, kept for backward
        self.errors = Blob()   # w_out * f(d)

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        names = ("pred", "target", "inside weights" if self.has_outside else "weights",
                 "outside weights")
        for index in range(1, len(bottom)):
            if (bottom[index].shape_at(0) != bottom[0].shape_at(0)
                    or bottom[index].count(1) != bottom[0].count(1)):
                raise self.error(f"bottom {index} ({names[index]}) must match pred's shape "
                                 f"{bottom[0].shape_string()}, got "
                                 f"{bottom[index].shape_string()}")
        self.diff.reshape(bottom[0].shape)
        self.errors.reshape(bottom[0].shape)
        self.outer = bottom[0].shape_at(0)
        self.channels = bottom[0].shape_at(1) if bottom[0].num_axes > 1 else 1
        self.inner = bottom[0].count(2) if bottom[0].num_axes > 2 else 1
        if len(top) > 1:
            top[1].reshape((self.outer, 1) + bottom[0].shape[2:])

    def scale(self):
        """The normalizer (see the module doc)."""
        if self.normalization is None:
            return max(1.0, float(self.outer))
        count = self.outer * self.inner
        return normalizer(self.normalization, self.outer, self.inner, count,
                          pre_fixed=self.pre_fixed)

    def _weights(self, bottom, attribute):
        """The inside and outside weight arrays (pred's own array where absent: unread)."""
        inside = getattr(bottom[2] if self.has_inside else bottom[0], attribute)
        outside = getattr(bottom[3], attribute) if self.has_outside else inside
        return inside, outside

    def forward_cpu(self, bottom, top):
        inside, outside = (w.reshape(-1) for w in self._weights(bottom, "data"))
        errors = self.errors.data.reshape(-1)
        kernels.smooth_l1_forward(bottom[0].flat_data, bottom[1].flat_data, inside, outside,
                                  self.has_inside, self.has_outside, self.sigma2,
                                  self.diff.data.reshape(-1), errors)
        total = float(np.sum(errors, dtype=np.float64))
        top[0].data[...] = total / self.scale()
        if len(top) > 1:
            top[1].data[...] = self.errors.data.reshape(
                self.outer, self.channels, self.inner).sum(axis=1).reshape(top[1].shape)

    def backward_cpu(self, top, propagate_down, bottom):
        inside, outside = (w.reshape(-1) for w in self._weights(bottom, "data"))
        for index, sign in ((0, 1.0), (1, -1.0)):
            if propagate_down[index]:
                alpha = np.float32(sign * float(top[0].diff[()]) / self.scale())
                kernels.smooth_l1_backward(self.diff.data.reshape(-1), inside, outside,
                                           self.has_outside, self.sigma2, alpha,
                                           bottom[index].flat_diff)
        _zero_weight_diffs(propagate_down, bottom)

    def forward_gpu(self, bottom, top):
        from pycaffe_cli.layers.kernels.cuda import loss as gpu_loss
        from pycaffe_cli.layers.kernels.cuda import smooth_l1 as gpu
        inside, outside = self._weights(bottom, "gpu_data")
        errors = self.errors.mutable_gpu_data
        gpu.smooth_l1_forward(bottom[0].gpu_data, bottom[1].gpu_data, inside, outside,
                              self.has_inside, self.has_outside, self.sigma2,
                              self.diff.mutable_gpu_data, errors)
        gpu_loss.sum_into(bottom[0].count(), errors, self.scale(), top[0].mutable_gpu_data)
        if len(top) > 1:
            gpu.channel_sums(errors, self.outer, self.channels, self.inner,
                             top[1].mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        from pycaffe_cli.layers.kernels.cuda import smooth_l1 as gpu
        inside, outside = self._weights(bottom, "gpu_data")
        for index, sign in ((0, 1.0), (1, -1.0)):
            if propagate_down[index]:
                alpha = np.float32(sign * float(top[0].cpu_diff[()]) / self.scale())
                gpu.smooth_l1_backward(self.diff.gpu_data, inside, outside, self.has_outside,
                                       self.sigma2, alpha, bottom[index].mutable_gpu_diff)
        _zero_weight_diffs(propagate_down, bottom)


def _zero_weight_diffs(propagate_down, bottom):
    """The weights get no gradient: a zero diff where one is asked for."""
    for index in range(2, len(bottom)):
        if propagate_down[index]:
            bottom[index].zero_diff()
