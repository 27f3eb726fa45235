"""MultinomialLogisticLoss: log loss on given probabilities (Caffe's
MultinomialLogisticLossLayer).

With probabilities p (bottom 0) viewed as (N, D) (N = shape[0]) and one integer label l_i in
[0, D) per item (bottom 1):

    loss = -sum_i log(max(p[i, l_i], 1e-20)) / N
    dp[i, l_i] = -loss_weight / (N * max(p[i, l_i], 1e-20)), and 0 elsewhere

No gradient flows to the labels.
"""
import numpy as np

from pycaffe_cli.layers.base import LossLayer, register
from pycaffe_cli.layers.softmax_with_loss import gather_labels

LOG_THRESHOLD = np.float32(1e-20)


@register("MultinomialLogisticLoss", v1="MULTINOMIAL_LOGISTIC_LOSS")
class MultinomialLogisticLossLayer(LossLayer):
    """-log of the probability (bottom 0) given to each item's label (bottom 1)."""

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        self.num = bottom[0].shape_at(0)
        self.dim = bottom[0].count(1)
        if bottom[1].num_axes > 4 or bottom[1].count(1) != 1:
            raise self.error(f"the label blob must hold one label per item (shape N or "
                             f"N x 1 x 1 x 1), got {bottom[1].shape_string()}")

    def _picked(self, bottom):
        """(item indices, labels, clamped probability of each item's label)."""
        prob = bottom[0].data.reshape(self.num, self.dim)
        labels, _ = gather_labels(self, bottom[1], self.num, 1, self.dim, None)
        items = np.arange(self.num)
        return items, labels[:, 0], np.maximum(prob[items, labels[:, 0]], LOG_THRESHOLD)

    def forward_cpu(self, bottom, top):
        _, _, picked = self._picked(bottom)
        top[0].data[...] = -np.log(picked).sum(dtype=np.float64) / self.num

    def backward_cpu(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error(f"{self.type} layer cannot backpropagate to label inputs")
        if not propagate_down[0]:
            return
        items, labels, picked = self._picked(bottom)
        diff = bottom[0].diff.reshape(self.num, self.dim)
        diff[...] = 0
        diff[items, labels] = np.float32(-top[0].diff[()] / self.num) / picked
