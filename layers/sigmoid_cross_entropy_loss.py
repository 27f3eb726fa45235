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

In GPU mode the per-element terms, their float64 sum (written into the loss top) and the
gradient run on the device; the count of non-ignored targets comes to the host only for the
VALID normaliser with an ignore_label, where Caffe syncs it too.
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import LossLayer, register
from pycaffe_cli.layers.kernels.cuda import loss as gpu
from pycaffe_cli.layers.softmax_with_loss import ignore_args, loss_normalization, normalizer
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
        self.pre_fixed = loss_param.pre_fixed_normalizer
        self._gpu_terms = Blob()

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        if bottom[0].count() != bottom[1].count():
            raise self.error(f"{self.type} layer inputs must have the same count: "
                             f"{bottom[0].shape_string()} vs {bottom[1].shape_string()}")
        self.outer = bottom[0].shape_at(0)
        self.inner = bottom[0].count(1)
        self._gpu_terms.reshape((bottom[0].count(),))

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
        self.scale = normalizer(self.normalization, self.outer, self.inner, count,
                                pre_fixed=self.pre_fixed)
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

    # --- GPU ---------------------------------------------------------------------------------
    def forward_gpu(self, bottom, top):
        count = bottom[0].count()
        targets = bottom[1].gpu_data
        ignore, has_ignore = ignore_args(self.ignore_label)
        terms = self._gpu_terms.mutable_gpu_data
        launch(_sigmoid_loss_kernel, count, bottom[0].gpu_data, targets, ignore,
               has_ignore, terms)
        valid = count
        if has_ignore and self.normalization == _Norm.VALID:
            valid, _ = gpu.label_counts(count, targets, 0, self.ignore_label)
        self.scale = normalizer(self.normalization, self.outer, self.inner, valid,
                                pre_fixed=self.pre_fixed)
        gpu.sum_into(count, terms, -self.scale, top[0].mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error(f"{self.type} layer cannot backpropagate to label inputs")
        if not propagate_down[0]:
            return
        alpha = np.float32(top[0].cpu_diff[()] / self.scale)
        ignore, has_ignore = ignore_args(self.ignore_label)
        launch(_sigmoid_loss_backward_kernel, bottom[0].count(),
               bottom[0].gpu_data, bottom[1].gpu_data, ignore,
               has_ignore, alpha, bottom[0].mutable_gpu_diff)


@cuda.jit(cache=True)
def _sigmoid_loss_kernel(n, x, t, ignore, has_ignore, terms):
    """terms = x (t - [x >= 0]) - log(1 + exp(x - 2 x [x >= 0])), 0 at ignored targets."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        value = x[index]
        target = t[index]
        if has_ignore and int(target) == ignore:
            terms[index] = 0
        else:
            positive = np.float32(1) if value >= 0 else np.float32(0)
            terms[index] = value * (target - positive) - math.log(
                np.float32(1) + math.exp(value - np.float32(2) * value * positive))


@cuda.jit(cache=True)
def _sigmoid_loss_backward_kernel(n, x, t, ignore, has_ignore, alpha, diff):
    """diff = (sigmoid(x) - t) * alpha, 0 at ignored targets."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        target = t[index]
        if has_ignore and int(target) == ignore:
            diff[index] = 0
        else:
            half = np.float32(0.5)
            sigmoid = half * math.tanh(half * x[index]) + half
            diff[index] = (sigmoid - target) * alpha
