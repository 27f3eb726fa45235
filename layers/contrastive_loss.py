"""ContrastiveLoss: siamese pair loss (Caffe's ContrastiveLossLayer).

Bottoms: features a and b, both (N, C) (or N x C x 1 x 1), and a pair label y with N values
(int(y) != 0: similar pair). With d_i = ||a_i - b_i||^2 and margin m
(``contrastive_loss_param.margin``, default 1):

    loss = sum_i (similar ? d_i : max(m - sqrt(d_i), 0)^2) / (2 N)
    legacy_version: the dissimilar term is max(m - d_i, 0) instead

    da = -db = loss_weight / N * (a - b) * (similar ? 1 : [m' > 0] * k_i), where
    m' = m - sqrt(d_i) and k_i = -m' / (sqrt(d_i) + 1e-4)  (legacy: m' = m - d_i, k_i = -1)

The 1e-4 in k_i is Caffe's guard against identical pairs. Both a and b receive gradients
(force_backward included); y never does.

In GPU mode one thread per pair computes d_i (added in float64, as the CPU path) and the
pair's term, the terms' float64 sum is written into the loss top on the device, and the
gradients are one kernel per bottom; nothing comes to the host.
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import LossLayer, register
from pycaffe_cli.layers.kernels.cuda import loss as gpu

_EPSILON = np.float32(1e-4)


@register("ContrastiveLoss", v1="CONTRASTIVE_LOSS")
class ContrastiveLossLayer(LossLayer):
    """Contrastive loss of feature pairs (bottoms 0, 1) given similarity labels (bottom 2)."""

    exact_num_bottom = 3

    def layer_setup(self, bottom, top):
        param = self.param.contrastive_loss_param
        self.margin = np.float32(param.margin)
        self.legacy = param.legacy_version
        self._gpu_pairs = Blob()  # GPU: d_i (data) and the pair terms (diff)

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        a, b, y = bottom
        for name, blob in (("first", a), ("second", b)):
            if blob.num_axes > 4 or blob.height != 1 or blob.width != 1:
                raise self.error(f"the {name} input must be N x C (or N x C x 1 x 1), got "
                                 f"{blob.shape_string()}")
        if a.channels != b.channels:
            raise self.error(f"both inputs must have the same number of channels: "
                             f"{a.shape_string()} vs {b.shape_string()}")
        self.num, self.channels = a.num, a.channels
        if y.num_axes > 4 or y.count(1) != 1 or y.count() != self.num:
            raise self.error(f"the similarity label blob must hold one value per pair "
                             f"({self.num}, shape N or N x 1 x 1 x 1), got {y.shape_string()}")
        self._gpu_pairs.reshape((self.num,))

    def forward_cpu(self, bottom, top):
        a = bottom[0].data.reshape(self.num, self.channels)
        b = bottom[1].data.reshape(self.num, self.channels)
        self.difference = a - b
        wide = self.difference.astype(np.float64)
        self.dist_sq = np.einsum("ij,ij->i", wide, wide).astype(np.float32)
        self.similar = bottom[2].flat_data.astype(np.int64) != 0
        if self.legacy:
            dissimilar = np.maximum(self.margin - self.dist_sq, np.float32(0))
        else:
            gap = np.maximum(self.margin - np.sqrt(self.dist_sq), np.float32(0))
            dissimilar = gap * gap
        terms = np.where(self.similar, self.dist_sq, dissimilar)
        top[0].data[...] = terms.sum(dtype=np.float64) / self.num / 2

    def _row_factors(self, alpha):
        """Per-pair multiplier of (a - b) in the gradient for a step size ``alpha``."""
        if self.legacy:
            gap = self.margin - self.dist_sq
            beta = np.full_like(gap, -alpha)
        else:
            dist = np.sqrt(self.dist_sq)
            gap = self.margin - dist
            beta = -alpha * gap / (dist + _EPSILON)
        dissimilar = np.where(gap > 0, beta, np.float32(0))
        return np.where(self.similar, alpha, dissimilar).astype(np.float32)

    def backward_cpu(self, top, propagate_down, bottom):
        # Caffe never propagates to the labels (and silently ignores a request to).
        for i, sign in ((0, 1.0), (1, -1.0)):
            if propagate_down[i]:
                alpha = np.float32(sign * top[0].diff[()] / self.num)
                diff = bottom[i].diff.reshape(self.num, self.channels)
                np.multiply(self._row_factors(alpha)[:, None], self.difference, out=diff)

    def allow_force_backward(self, bottom_index):
        return bottom_index != 2

    # --- GPU ---------------------------------------------------------------------------------
    def forward_gpu(self, bottom, top):
        terms = self._gpu_pairs.mutable_gpu_diff
        launch(_pair_terms_kernel, self.num, self.channels, bottom[0].gpu_data,
               bottom[1].gpu_data, bottom[2].gpu_data,
               self.margin, self.legacy, self._gpu_pairs.mutable_gpu_data, terms)
        gpu.sum_into(self.num, terms, 2.0 * self.num, top[0].mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        for i, sign in ((0, 1.0), (1, -1.0)):
            if propagate_down[i]:
                alpha = np.float32(sign * top[0].cpu_diff[()] / self.num)
                launch(_contrastive_backward_kernel, self.num * self.channels, self.channels,
                       bottom[0].gpu_data, bottom[1].gpu_data,
                       bottom[2].gpu_data,
                       self._gpu_pairs.gpu_data, self.margin, self.legacy,
                       alpha, bottom[i].mutable_gpu_diff)


@cuda.jit(cache=True)
def _pair_terms_kernel(n, channels, a, b, y, margin, legacy, dist_sq, terms):
    """dist_sq[i] = ||a_i - b_i||^2 and terms[i] = the pair's loss term (module doc)."""
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        total = 0.0
        for c in range(i * channels, (i + 1) * channels):
            step = np.float64(a[c] - b[c])
            total += step * step
        distance = np.float32(total)
        dist_sq[i] = distance
        if int(y[i]) != 0:
            terms[i] = distance
        elif legacy:
            gap = margin - distance
            terms[i] = np.float32(0) if gap < 0 else gap
        else:
            gap = margin - math.sqrt(distance)
            gap = np.float32(0) if gap < 0 else gap
            terms[i] = gap * gap


@cuda.jit(cache=True)
def _contrastive_backward_kernel(n, channels, a, b, y, dist_sq, margin, legacy, alpha, diff):
    """diff = (a - b) times the pair's factor for step ``alpha`` (module doc)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        i = index // channels
        if int(y[i]) != 0:
            factor = alpha
        elif legacy:
            factor = -alpha if margin - dist_sq[i] > 0 else np.float32(0)
        else:
            distance = math.sqrt(dist_sq[i])
            gap = margin - distance
            factor = -alpha * gap / (distance + _EPSILON) if gap > 0 else np.float32(0)
        diff[index] = factor * (a[index] - b[index])
