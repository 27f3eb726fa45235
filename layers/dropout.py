"""Dropout (Caffe's DropoutLayer).

With ratio r and scale s = 1 / (1 - r):

    TRAIN:  mask ~ Bernoulli(1 - r) per element (from backend.rng());  y = x * mask * s
            dx = dy * mask * s
    TEST:   y = x;  dx = dy

With ``scale_train`` false (a field of some Caffe forks; default true) the scaling moves to
test time: TRAIN y = x * mask and TEST y = x * (1 - r). In-place use is safe.
"""
import numpy as np

from pycaffe_cli import backend
from pycaffe_cli.layers.base import NeuronLayer, register
from pycaffe_cli.proto import caffe_pb2


@register("Dropout", v1="DROPOUT")
class DropoutLayer(NeuronLayer):
    """Zero each element with probability ``dropout_ratio`` while training."""

    def layer_setup(self, bottom, top):
        p = self.param.dropout_param
        self.ratio = float(np.float32(p.dropout_ratio))
        if not 0.0 <= self.ratio < 1.0:
            raise self.error(f"dropout_ratio must be in [0, 1), got {p.dropout_ratio:g}")
        self.scale = np.float32(1.0 / (1.0 - self.ratio))
        fields = caffe_pb2.DropoutParameter.DESCRIPTOR.fields_by_name
        self.scale_train = p.scale_train if "scale_train" in fields else True

    def _train_scale(self):
        return self.scale if self.scale_train else np.float32(1)

    def forward_cpu(self, bottom, top):
        if self.phase == caffe_pb2.TRAIN:
            keep = backend.rng().random(bottom[0].shape, dtype=np.float32) >= self.ratio
            self.mask = keep.astype(np.float32) * self._train_scale()
            np.multiply(bottom[0].data, self.mask, out=top[0].data)
        elif self.scale_train:
            top[0].data[...] = bottom[0].data
        else:
            np.multiply(bottom[0].data, np.float32(1.0 - self.ratio), out=top[0].data)

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        if self.phase == caffe_pb2.TRAIN:
            np.multiply(top[0].diff, self.mask, out=bottom[0].diff)
        elif self.scale_train:
            bottom[0].diff[...] = top[0].diff
        else:
            np.multiply(top[0].diff, np.float32(1.0 - self.ratio), out=bottom[0].diff)
