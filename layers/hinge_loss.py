"""HingeLoss: one-vs-all hinge loss (Caffe's HingeLossLayer).

With scores x viewed as (N, D) (N = shape[0]) and one integer label l_i in [0, D) per item,
let s = -1 at the true class (i, l_i) and +1 elsewhere, and m = max(0, 1 + s x):

    L1 (default):  loss = sum(m) / N,     dx = s * sign(m) * loss_weight / N
    L2:            loss = sum(m^2) / N,   dx = 2 s m * loss_weight / N

(``hinge_loss_param.norm``). No gradient flows to the labels.
"""
import numpy as np

from pycaffe_cli.layers.base import LossLayer, register
from pycaffe_cli.layers.softmax_with_loss import gather_labels
from pycaffe_cli.proto import caffe_pb2

_L2 = caffe_pb2.HingeLossParameter.L2


@register("HingeLoss", v1="HINGE_LOSS")
class HingeLossLayer(LossLayer):
    """L1 or L2 one-vs-all hinge loss of scores (bottom 0) against labels (bottom 1)."""

    def layer_setup(self, bottom, top):
        self.squared = self.param.hinge_loss_param.norm == _L2

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        self.num = bottom[0].shape_at(0)
        self.dim = bottom[0].count(1)
        if bottom[1].count() != self.num:
            raise self.error(f"the label blob must hold one label per item ({self.num}), "
                             f"got {bottom[1].shape_string()}")

    def forward_cpu(self, bottom, top):
        x = bottom[0].data.reshape(self.num, self.dim)
        labels, _ = gather_labels(self, bottom[1], self.num, 1, self.dim, None)
        self.sign = np.ones_like(x)
        self.sign[np.arange(self.num), labels[:, 0]] = -1
        self.margin = np.maximum(np.float32(0), np.float32(1) + self.sign * x)
        if self.squared:
            total = np.dot(self.margin.ravel().astype(np.float64), self.margin.ravel())
        else:
            total = self.margin.sum(dtype=np.float64)
        top[0].data[...] = total / self.num

    def backward_cpu(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error(f"{self.type} layer cannot backpropagate to label inputs")
        if not propagate_down[0]:
            return
        diff = bottom[0].diff.reshape(self.num, self.dim)
        loss_weight = top[0].diff[()]
        if self.squared:
            np.multiply(self.sign, self.margin, out=diff)
            diff *= np.float32(loss_weight * 2 / self.num)
        else:
            np.multiply(self.sign, np.sign(self.margin), out=diff)
            diff *= np.float32(loss_weight / self.num)
