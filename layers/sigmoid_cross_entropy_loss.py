"""SigmoidCrossEntropyLoss: logistic loss on raw scores (Caffe's SigmoidCrossEntropyLossLayer).

With scores x (bottom 0) and targets t in [0, 1] (bottom 1, same count), summed over the
elements whose target is not ``loss_param.ignore_label`` (compared as int(t), as Caffe does):

    loss = -sum(x * (t - [x >= 0]) - log(1 + exp(x - 2 x [x >= 0]))) / normalizer
    dx   = (sigmoid(x) - t) * loss_weight / normalizer, and 0 at ignored elements

The loss is Caffe's overflow-free form of -t log(sigmoid(x)) - (1 - t) log(1 - sigmoid(x)).
normalizer = max(1, n) as in SoftmaxWithLoss with outer = shape[0] and inner = count(1), but
the default here is BATCH_SIZE (Caffe keeps this layer's historical divide-by-num); an explicit
``normalization`` wins, else the legacy ``normalize`` flag means VALID (true) or BATCH_SIZE.
No gradient flows to the targets.
"""
import numpy as np

from pycaffe_cli.layers.base import LossLayer, register
from pycaffe_cli.layers.softmax_with_loss import loss_normalization, normalizer
from pycaffe_cli.proto import caffe_pb2

_Norm = caffe_pb2.LossParameter


def sigmoid_loss_normalization(loss_param):
    """Caffe's choice for this layer: BATCH_SIZE unless ``normalization``/``normalize`` is set."""
    if not loss_param.HasField("normalization") and not loss_param.HasField("normalize"):
        return _Norm.BATCH_SIZE
    return loss_normalization(loss_param)


@register("SigmoidCrossEntropyLoss", v1="SIGMOID_CROSS_ENTROPY_LOSS")
class SigmoidCrossEntropyLossLayer(LossLayer):
    """Cross-entropy between sigmoid(scores) (bottom 0) and targets (bottom 1)."""

    def layer_setup(self, bottom, top):
        loss_param = self.param.loss_param
        self.ignore_label = (loss_param.ignore_label if loss_param.HasField("ignore_label")
                             else None)
        self.normalization = sigmoid_loss_normalization(loss_param)

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        if bottom[0].count() != bottom[1].count():
            raise self.error(f"{self.type} layer inputs must have the same count: "
                             f"{bottom[0].shape_string()} vs {bottom[1].shape_string()}")
        self.outer = bottom[0].shape_at(0)
        self.inner = bottom[0].count(1)

    def _valid(self, target):
        """Mask of the elements that count (all when there is no ignore_label)."""
        if self.ignore_label is None:
            return None
        return target.astype(np.int64) != self.ignore_label

    def forward_cpu(self, bottom, top):
        x = bottom[0].flat_data
        t = bottom[1].flat_data
        # Caffe's SigmoidLayer output, kept for backward as Caffe keeps it.
        self.sigmoid = (0.5 * np.tanh(0.5 * x.astype(np.float64)) + 0.5).astype(np.float32)
        positive = (x >= 0).astype(np.float32)
        terms = x * (t - positive) - np.log(np.float32(1) + np.exp(x - 2 * x * positive))
        valid = self._valid(t)
        if valid is None:
            total, count = terms.sum(dtype=np.float64), terms.size
        else:
            total, count = terms[valid].sum(dtype=np.float64), int(valid.sum())
        self.scale = normalizer(self.normalization, self.outer, self.inner, count)
        top[0].data[...] = -total / self.scale

    def backward_cpu(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error(f"{self.type} layer cannot backpropagate to label inputs")
        if not propagate_down[0]:
            return
        t = bottom[1].flat_data
        diff = bottom[0].flat_diff
        np.subtract(self.sigmoid, t, out=diff)
        valid = self._valid(t)
        if valid is not None:
            diff[~valid] = 0
        diff *= np.float32(top[0].diff[()] / self.scale)
