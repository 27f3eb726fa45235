"""InfogainLoss: softmax then an information-gain-weighted log loss (Caffe's InfogainLossLayer).

Scores x (bottom 0) are viewed as (outer, C, inner) along ``infogain_loss_param.axis``, labels
l (bottom 1) hold outer*inner integers, and H is a C x C matrix: bottom 2 when given, else the
BlobProto file ``infogain_loss_param.source``. With p = softmax(x) over the axis, summed over
the locations whose label is not ``loss_param.ignore_label``:

    loss = -sum_{i,j} sum_c H[l_ij, c] log(max(p[i, c, j], 1e-20)) / normalizer
    dx   = (p[i, :, j] * sum_c H[l_ij, c] - H[l_ij, :]) * loss_weight / normalizer,
           and 0 at ignored locations

normalizer as in SoftmaxWithLoss (``loss_param.normalization``, default VALID); Caffe rejects the
deprecated ``normalize`` flag for this layer, and so do we. An optional second top receives p.
No gradient flows to the labels or to H.

In GPU mode the softmax, the per-location terms (one thread per location, added over the
classes in float64 as the CPU path), their float64 sum written into the loss top, H's row
sums and the gradient all run on the device; only the label counts come to the host (the
VALID normaliser and the out-of-range check). H from a file goes to the device once.
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.blob_proto import blob_proto_to_array
from pycaffe_cli.io.prototxt import read_blob_proto
from pycaffe_cli.layers.base import LossLayer, register
from pycaffe_cli.layers.kernels.cuda import loss as gpu
from pycaffe_cli.layers.softmax import axis_dims, softmax_forward
from pycaffe_cli.layers.softmax_with_loss import (gather_labels, ignore_args, normalizer,
                                                  softmax_loss_forward_gpu)
from pycaffe_cli.layers.views import layer_axis, three_axis_view

LOG_THRESHOLD = np.float32(1e-20)


@register("InfogainLoss", v1="INFOGAIN_LOSS")
class InfogainLossLayer(LossLayer):
    """Infogain loss of softmax(scores) (bottom 0) against labels (bottom 1), H from bottom 2
    or ``infogain_loss_param.source``."""

    exact_num_bottom = None
    min_num_bottom = 2
    max_num_bottom = 3
    exact_num_top = None
    min_num_top = 1
    max_num_top = 2

    def layer_setup(self, bottom, top):
        loss_param = self.param.loss_param
        self.ignore_label = (loss_param.ignore_label if loss_param.HasField("ignore_label")
                             else None)
        if loss_param.HasField("normalize"):
            raise self.error('loss_param.normalize is deprecated for this layer; use '
                             '"normalization"')
        self.normalization = loss_param.normalization
        self.pre_fixed = loss_param.pre_fixed_normalizer
        self.prob = Blob()
        self._scratch = Blob()  # GPU: softmax max / sum per location, then the loss terms
        self._gpu_row_sums = Blob()  # GPU: sum_c H[r, c] per row r
        self.infogain = None
        self._infogain_blob = Blob()  # GPU: H from the file, on the device once
        if len(bottom) < 3:
            self.infogain = self._read_matrix(self.param.infogain_loss_param)
            self._infogain_blob.reshape(self.infogain.shape)
            self._infogain_blob.data[...] = self.infogain

    def _read_matrix(self, infogain_param):
        if not infogain_param.HasField("source"):
            raise self.error("the infogain matrix must be given as a third bottom or as "
                             "infogain_loss_param.source")
        try:
            proto = read_blob_proto(infogain_param.source, what="infogain matrix file")
            return blob_proto_to_array(proto).astype(np.float32).ravel()
        except CaffeError as error:
            raise self.error(str(error)) from None

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        self.axis = layer_axis(self, bottom[0], self.param.infogain_loss_param.axis)
        self.outer = bottom[0].count(0, self.axis)
        self.inner = bottom[0].count(self.axis + 1)
        self.num_labels = bottom[0].shape[self.axis]
        if self.outer * self.inner != bottom[1].count():
            raise self.error(
                f"number of labels must match number of predictions: with infogain axis "
                f"{self.axis} and predictions {bottom[0].shape_string()} the label blob must "
                f"hold {self.outer * self.inner} values, but {bottom[1].shape_string()} holds "
                f"{bottom[1].count()}")
        count = self._matrix(bottom).size
        if count != self.num_labels ** 2:
            source = "bottom[2]" if len(bottom) > 2 else "the infogain matrix file"
            raise self.error(f"the infogain matrix H must be {self.num_labels}x"
                             f"{self.num_labels} ({self.num_labels ** 2} values) for "
                             f"{self.num_labels} classes, but {source} holds {count}")
        self.prob.reshape_like(bottom[0])
        self._scratch.reshape((2 * self.outer * self.inner,))
        self._gpu_row_sums.reshape((self.num_labels,))
        if len(top) > 1:
            top[1].reshape_like(bottom[0])

    def _matrix(self, bottom):
        """H as a flat float32 array (read from the blob each pass: bottom 2 may change)."""
        return bottom[2].flat_data if len(bottom) > 2 else self.infogain

    def _label_rows(self, bottom):
        """(labels, valid mask, H rows of the labels as (outer, C, inner))."""
        labels, valid = gather_labels(self, bottom[1], self.outer, self.inner,
                                      self.num_labels, self.ignore_label)
        matrix = self._matrix(bottom).reshape(self.num_labels, self.num_labels)
        return labels, valid, matrix, np.moveaxis(matrix[labels], 2, 1)

    def forward_cpu(self, bottom, top):
        prob = three_axis_view(self.prob.data, self.axis)
        softmax_forward(three_axis_view(bottom[0].data, self.axis), prob)
        _, valid, _, rows = self._label_rows(bottom)
        log_prob = np.log(np.maximum(prob, LOG_THRESHOLD))
        per_location = np.einsum("ocj,ocj->oj", rows.astype(np.float64), log_prob)
        scale = normalizer(self.normalization, self.outer, self.inner, int(valid.sum()),
                           pre_fixed=self.pre_fixed)
        top[0].data[...] = -per_location[valid].sum() / scale
        if len(top) > 1:
            top[1].data[...] = self.prob.data

    def backward_cpu(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error(f"{self.type} layer cannot backpropagate to label inputs")
        if len(propagate_down) > 2 and propagate_down[2]:
            raise self.error(f"{self.type} layer cannot backpropagate to infogain inputs")
        if not propagate_down[0]:
            return
        prob = three_axis_view(self.prob.data, self.axis)
        diff = three_axis_view(bottom[0].diff, self.axis)
        labels, valid, matrix, rows = self._label_rows(bottom)
        row_sums = matrix.sum(axis=1, dtype=np.float64).astype(np.float32)
        np.multiply(prob, row_sums[labels][:, None, :], out=diff)
        diff -= rows
        diff *= valid[:, None, :]
        scale = normalizer(self.normalization, self.outer, self.inner, int(valid.sum()),
                           pre_fixed=self.pre_fixed)
        diff *= np.float32(top[0].diff[()] / scale)

    def allow_force_backward(self, bottom_index):
        return bottom_index == 0

    # --- GPU ---------------------------------------------------------------------------------
    def _gpu_matrix(self, bottom):
        blob = bottom[2] if len(bottom) > 2 else self._infogain_blob
        return blob.gpu_data

    def forward_gpu(self, bottom, top):
        softmax_loss_forward_gpu(self, bottom, top, _infogain_terms_kernel,
                                 self._gpu_matrix(bottom))

    def backward_gpu(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error(f"{self.type} layer cannot backpropagate to label inputs")
        if len(propagate_down) > 2 and propagate_down[2]:
            raise self.error(f"{self.type} layer cannot backpropagate to infogain inputs")
        if not propagate_down[0]:
            return
        _, channels, inner = axis_dims(bottom[0], self.axis)
        matrix = self._gpu_matrix(bottom)
        row_sums = self._gpu_row_sums.mutable_gpu_data
        launch(_row_sums_kernel, channels, matrix, row_sums)
        alpha = np.float32(top[0].cpu_diff[()] / self._scale)
        ignore, has_ignore = ignore_args(self.ignore_label)
        launch(_infogain_backward_kernel, bottom[0].count(), self.prob.gpu_data,
               bottom[1].gpu_data, matrix, row_sums, channels, inner, ignore,
               has_ignore, alpha, bottom[0].mutable_gpu_diff)


@cuda.jit(cache=True)
def _infogain_terms_kernel(n, prob, labels, matrix, channels, inner, ignore, has_ignore,
                           terms):
    """terms[p] = sum_c H[l_p, c] log(max(prob[., c, .], 1e-20)), 0 where not counted."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        label = gpu.label_class(labels[index], channels, ignore, has_ignore)
        total = 0.0
        if label >= 0:
            start = index // inner * channels * inner + index % inner
            for c in range(channels):
                p = prob[start + c * inner]
                log_p = math.log(LOG_THRESHOLD if p < LOG_THRESHOLD else p)
                total += np.float64(matrix[label * channels + c]) * np.float64(log_p)
        terms[index] = np.float32(total)


@cuda.jit(cache=True)
def _row_sums_kernel(n, matrix, row_sums):
    """row_sums[r] = sum_c H[r, c], added in float64."""
    for r in range(cuda.grid(1), n, cuda.gridsize(1)):
        total = 0.0
        for c in range(r * n, (r + 1) * n):
            total += np.float64(matrix[c])
        row_sums[r] = np.float32(total)


@cuda.jit(cache=True)
def _infogain_backward_kernel(n, prob, labels, matrix, row_sums, channels, inner, ignore,
                              has_ignore, alpha, diff):
    """diff = (prob * rowsum(H)[l] - H[l, c]) * alpha, 0 where not counted."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        position = index // (channels * inner) * inner + index % inner
        label = gpu.label_class(labels[position], channels, ignore, has_ignore)
        if label < 0:
            diff[index] = 0
        else:
            c = index // inner % channels
            diff[index] = (prob[index] * row_sums[label] - matrix[label * channels + c]) * alpha
