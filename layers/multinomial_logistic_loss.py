"""MultinomialLogisticLoss: log loss on given probabilities (Caffe's
MultinomialLogisticLossLayer).

With probabilities p (bottom 0) viewed as (N, D) (N = shape[0]) and one integer label l_i in
[0, D) per item (bottom 1):

    loss = -sum_i log(max(p[i, l_i], 1e-20)) / N
    dp[i, l_i] = -loss_weight / (N * max(p[i, l_i], 1e-20)), and 0 elsewhere

No gradient flows to the labels.

In GPU mode the per-item log terms, their float64 sum (written into the loss top) and the
gradient run on the device; only the label range check's counts come to the host.
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import LossLayer, register
from pycaffe_cli.layers.kernels.cuda import loss as gpu
from pycaffe_cli.layers.softmax_with_loss import count_labels_gpu, gather_labels

LOG_THRESHOLD = np.float32(1e-20)


@register("MultinomialLogisticLoss", v1="MULTINOMIAL_LOGISTIC_LOSS")
class MultinomialLogisticLossLayer(LossLayer):
    """-log of the probability (bottom 0) given to each item's label (bottom 1)."""

    def layer_setup(self, bottom, top):
        self._gpu_terms = Blob()  # GPU: log of each item's clamped probability

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        self.num = bottom[0].shape_at(0)
        self.dim = bottom[0].count(1)
        if bottom[1].num_axes > 4 or bottom[1].count(1) != 1:
            raise self.error(f"the label blob must hold one label per item (shape N or "
                             f"N x 1 x 1 x 1), got {bottom[1].shape_string()}")
        self._gpu_terms.reshape((self.num,))

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

    # --- GPU ---------------------------------------------------------------------------------
    def forward_gpu(self, bottom, top):
        count_labels_gpu(self, bottom[1], self.dim, None)
        terms = self._gpu_terms.mutable_gpu_data
        launch(_log_picked_kernel, self.num, bottom[0].gpu_data,
               bottom[1].gpu_data, self.dim, terms)
        gpu.sum_into(self.num, terms, -float(self.num), top[0].mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error(f"{self.type} layer cannot backpropagate to label inputs")
        if not propagate_down[0]:
            return
        alpha = np.float32(-top[0].cpu_diff[()] / self.num)
        launch(_picked_backward_kernel, bottom[0].count(), bottom[0].gpu_data,
               bottom[1].gpu_data, self.dim, alpha, bottom[0].mutable_gpu_diff)


@cuda.jit(cache=True)
def _log_picked_kernel(n, prob, labels, dim, terms):
    """terms[i] = log(max(prob[i, l_i], 1e-20))."""
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        label = gpu.label_class(labels[i], dim, 0, False)
        if label < 0:  # out of range: forward has raised already
            terms[i] = 0
        else:
            picked = prob[i * dim + label]
            terms[i] = math.log(LOG_THRESHOLD if picked < LOG_THRESHOLD else picked)


@cuda.jit(cache=True)
def _picked_backward_kernel(n, prob, labels, dim, alpha, diff):
    """diff = alpha / max(prob, 1e-20) at each item's label, 0 elsewhere."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        label = gpu.label_class(labels[index // dim], dim, 0, False)
        if index % dim == label:
            picked = prob[index]
            diff[index] = alpha / (LOG_THRESHOLD if picked < LOG_THRESHOLD else picked)
        else:
            diff[index] = 0
