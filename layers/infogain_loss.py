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
"""
import numpy as np

from pycaffe_cli.blob import Blob
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.blob_proto import blob_proto_to_array
from pycaffe_cli.io.prototxt import read_blob_proto
from pycaffe_cli.layers.base import LossLayer, register
from pycaffe_cli.layers.softmax import softmax_forward
from pycaffe_cli.layers.softmax_with_loss import gather_labels, normalizer
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
        self.prob = Blob()
        self.infogain = None
        if len(bottom) < 3:
            self.infogain = self._read_matrix(self.param.infogain_loss_param)

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
        scale = normalizer(self.normalization, self.outer, self.inner, int(valid.sum()))
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
        scale = normalizer(self.normalization, self.outer, self.inner, int(valid.sum()))
        diff *= np.float32(top[0].diff[()] / scale)

    def allow_force_backward(self, bottom_index):
        return bottom_index == 0
