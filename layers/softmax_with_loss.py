"""SoftmaxWithLoss: softmax then multinomial logistic loss (Caffe's SoftmaxWithLossLayer).

With p = softmax(x) along ``softmax_param.axis`` (x viewed as (outer, C, inner)) and integer
labels l (outer x inner values, some possibly equal to ``loss_param.ignore_label``):

    loss = -sum_{valid i,j} log(max(p[i, l_ij, j], FLT_MIN)) / normalizer
    dx   = (p - onehot(l)) * loss_weight / normalizer, and 0 at ignored locations

normalizer = max(1, n) with n by ``loss_param.normalization``: FULL outer*inner, VALID the
number of non-ignored labels, BATCH_SIZE outer, NONE 1, PRE_FIXED (R-FCN's)
``loss_param.pre_fixed_normalizer``. The legacy ``normalize`` flag, when
``normalization`` is not set, means VALID (true) or BATCH_SIZE (false). An optional second top
receives the probabilities.

In GPU mode everything runs on the device: the softmax into ``prob``, the per-location
-log terms, their float64 sum written into the loss top, and the gradient. Only the label
counts come to the host (the VALID normaliser, and the out-of-range check).
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda import memory
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import LossLayer, register
from pycaffe_cli.layers.kernels.cuda import loss as gpu
from pycaffe_cli.layers.softmax import axis_dims, softmax_forward
from pycaffe_cli.layers.views import layer_axis, three_axis_view
from pycaffe_cli.proto import caffe_pb2

FLT_MIN = np.float32(np.finfo(np.float32).tiny)
_Norm = caffe_pb2.LossParameter


def loss_normalization(loss_param):
    """The NormalizationMode a LossParameter asks for, honouring legacy ``normalize``."""
    if not loss_param.HasField("normalization") and loss_param.HasField("normalize"):
        return _Norm.VALID if loss_param.normalize else _Norm.BATCH_SIZE
    return loss_param.normalization


def normalizer(mode, outer, inner, valid_count, pre_fixed=1.0):
    """Caffe's LossLayer::GetNormalizer, clamped below at 1; PRE_FIXED (R-FCN's fork) gives
    ``pre_fixed`` (loss_param.pre_fixed_normalizer)."""
    value = {_Norm.FULL: outer * inner, _Norm.VALID: valid_count,
             _Norm.BATCH_SIZE: outer, _Norm.NONE: 1, _Norm.PRE_FIXED: pre_fixed}[mode]
    return max(1.0, float(value))


def gather_labels(layer, label_blob, outer, inner, num_classes, ignore_label):
    """Integer labels as (outer, inner) plus the mask of non-ignored ones.

    Raises the layer's CaffeError for a non-ignored label outside [0, num_classes).
    """
    labels = label_blob.data.reshape(outer, inner).astype(np.int64)
    valid = np.ones(labels.shape, bool) if ignore_label is None else labels != ignore_label
    bad = valid & ((labels < 0) | (labels >= num_classes))
    if bad.any():
        raise layer.error(f"label value {int(labels[bad][0])} is out of range for "
                          f"{num_classes} classes (labels must be in [0, {num_classes}))")
    return np.where(valid, labels, 0), valid


def ignore_args(ignore_label):
    """(ignore_label, has_ignore) as kernel arguments."""
    return (0, False) if ignore_label is None else (int(ignore_label), True)


def count_labels_gpu(layer, label_blob, num_classes, ignore_label):
    """gather_labels' check on the device: the number of labels that count. A label out of
    range raises gather_labels' error (the labels come to the host only then)."""
    count = label_blob.count()
    valid, bad = gpu.label_counts(count, label_blob.gpu_data, num_classes,
                                  ignore_label)
    if bad:
        gather_labels(layer, label_blob, count, 1, num_classes, ignore_label)
    return valid


def softmax_loss_forward_gpu(layer, bottom, top, terms_kernel, *extra):
    """The GPU forward of a softmax-based loss (SoftmaxWithLoss, InfogainLoss): softmax of
    bottom[0] into ``layer.prob``, one loss term per (outer, inner) position by
    ``terms_kernel(n, prob, labels, *extra, channels, inner, ignore_label, has_ignore, out)``,
    their sum / -normaliser into top[0] on the device (``layer._scale`` keeps the normaliser
    for backward), and prob into top[1] when asked for."""
    outer, channels, inner = axis_dims(bottom[0], layer.axis)
    positions = outer * inner
    scratch = layer._scratch.mutable_gpu_data
    gpu.softmax_forward(bottom[0].gpu_data, layer.prob.mutable_gpu_data, outer,
                        channels, inner, scratch)
    valid = count_labels_gpu(layer, bottom[1], channels, layer.ignore_label)
    launch(terms_kernel, positions, layer.prob.gpu_data,
           bottom[1].gpu_data, *extra, channels, inner,
           *ignore_args(layer.ignore_label), scratch)
    layer._scale = normalizer(layer.normalization, outer, inner, valid,
                              pre_fixed=layer.pre_fixed)
    gpu.sum_into(positions, scratch, -layer._scale, top[0].mutable_gpu_data)
    if len(top) > 1:
        memory.copy(layer.prob.gpu_data, top[1].mutable_gpu_data)


@register("SoftmaxWithLoss", v1="SOFTMAX_LOSS")
class SoftmaxWithLossLayer(LossLayer):
    """Softmax cross-entropy of predictions (bottom 0) against integer labels (bottom 1)."""

    exact_num_top = None
    min_num_top = 1
    max_num_top = 2

    def layer_setup(self, bottom, top):
        loss_param = self.param.loss_param
        self.ignore_label = (loss_param.ignore_label if loss_param.HasField("ignore_label")
                             else None)
        self.normalization = loss_normalization(loss_param)
        self.pre_fixed = loss_param.pre_fixed_normalizer
        self.prob = Blob()
        self._scratch = Blob()  # GPU: softmax max / sum per location, then the loss terms

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        self.axis = layer_axis(self, bottom[0], self.param.softmax_param.axis)
        self.outer = bottom[0].count(0, self.axis)
        self.inner = bottom[0].count(self.axis + 1)
        if self.outer * self.inner != bottom[1].count():
            raise self.error(
                f"number of labels must match number of predictions: with softmax axis "
                f"{self.axis} and predictions {bottom[0].shape_string()} the label blob must "
                f"hold {self.outer * self.inner} values, but {bottom[1].shape_string()} holds "
                f"{bottom[1].count()}")
        self.prob.reshape_like(bottom[0])
        self._scratch.reshape((2 * self.outer * self.inner,))
        if len(top) > 1:
            top[1].reshape_like(bottom[0])

    def forward_cpu(self, bottom, top):
        prob = three_axis_view(self.prob.data, self.axis)
        softmax_forward(three_axis_view(bottom[0].data, self.axis), prob)
        labels, valid = gather_labels(self, bottom[1], self.outer, self.inner,
                                      prob.shape[1], self.ignore_label)
        picked = np.take_along_axis(prob, labels[:, None, :], axis=1)[:, 0, :]
        log_prob = np.log(np.maximum(picked[valid], FLT_MIN)).astype(np.float64)
        scale = normalizer(self.normalization, self.outer, self.inner, int(valid.sum()),
                           pre_fixed=self.pre_fixed)
        top[0].data[...] = -log_prob.sum() / scale
        if len(top) > 1:
            top[1].data[...] = self.prob.data

    def backward_cpu(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error(f"{self.type} layer cannot backpropagate to label inputs")
        if not propagate_down[0]:
            return
        prob = three_axis_view(self.prob.data, self.axis)
        diff = three_axis_view(bottom[0].diff, self.axis)
        labels, valid = gather_labels(self, bottom[1], self.outer, self.inner,
                                      prob.shape[1], self.ignore_label)
        diff[...] = prob
        outer_index, inner_index = np.nonzero(valid)
        diff[outer_index, labels[valid], inner_index] -= np.float32(1)
        diff *= valid[:, None, :]
        scale = normalizer(self.normalization, self.outer, self.inner, int(valid.sum()),
                           pre_fixed=self.pre_fixed)
        diff *= np.float32(top[0].diff[()] / scale)

    # --- GPU ---------------------------------------------------------------------------------
    def forward_gpu(self, bottom, top):
        softmax_loss_forward_gpu(self, bottom, top, _log_prob_kernel)

    def backward_gpu(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error(f"{self.type} layer cannot backpropagate to label inputs")
        if not propagate_down[0]:
            return
        _, channels, inner = axis_dims(bottom[0], self.axis)
        alpha = np.float32(top[0].cpu_diff[()] / self._scale)
        ignore, has_ignore = ignore_args(self.ignore_label)
        launch(_softmax_loss_backward_kernel, bottom[0].count(),
               self.prob.gpu_data, bottom[1].gpu_data, channels,
               inner, ignore, has_ignore, alpha, bottom[0].mutable_gpu_diff)


@cuda.jit(cache=True)
def _log_prob_kernel(n, prob, labels, channels, inner, ignore, has_ignore, terms):
    """terms[p] = log(max(prob of the label at location p, FLT_MIN)), 0 where not counted."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        label = gpu.label_class(labels[index], channels, ignore, has_ignore)
        if label < 0:
            terms[index] = 0
        else:
            picked = prob[(index // inner * channels + label) * inner + index % inner]
            terms[index] = math.log(FLT_MIN if picked < FLT_MIN else picked)


@cuda.jit(cache=True)
def _softmax_loss_backward_kernel(n, prob, labels, channels, inner, ignore, has_ignore, alpha,
                                  diff):
    """diff = (prob - onehot(label)) * alpha, 0 at locations that do not count."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        position = index // (channels * inner) * inner + index % inner
        label = gpu.label_class(labels[position], channels, ignore, has_ignore)
        if label < 0:
            diff[index] = 0
        else:
            grad = prob[index]
            if index // inner % channels == label:
                grad -= np.float32(1)
            diff[index] = grad * alpha
