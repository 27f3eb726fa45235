"""HingeLoss: one-vs-all hinge loss (Caffe's HingeLossLayer).

With scores x viewed as (N, D) (N = shape[0]) and one integer label l_i in [0, D) per item,
let s = -1 at the true class (i, l_i) and +1 elsewhere, and m = max(0, 1 + s x):

    L1 (default):  loss = sum(m) / N,     dx = s * sign(m) * loss_weight / N
    L2:            loss = sum(m^2) / N,   dx = 2 s m * loss_weight / N

(``hinge_loss_param.norm``). No gradient flows to the labels.

In GPU mode the margins m (kept for backward), their float64 sum (of squares for L2) written
into the loss top, and the gradient run on the device; only the label range check's counts
come to the host.
"""
import numpy as np
from numba import cuda

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import LossLayer, register
from pycaffe_cli.layers.kernels.cuda import loss as gpu
from pycaffe_cli.layers.softmax_with_loss import count_labels_gpu, gather_labels
from pycaffe_cli.proto import caffe_pb2

_L2 = caffe_pb2.HingeLossParameter.L2


@register("HingeLoss", v1="HINGE_LOSS")
class HingeLossLayer(LossLayer):
    """L1 or L2 one-vs-all hinge loss of scores (bottom 0) against labels (bottom 1)."""

    def layer_setup(self, bottom, top):
        self.squared = self.param.hinge_loss_param.norm == _L2
        self._gpu_margin = Blob()  # GPU: m, kept for backward

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        self.num = bottom[0].shape_at(0)
        self.dim = bottom[0].count(1)
        if bottom[1].count() != self.num:
            raise self.error(f"the label blob must hold one label per item ({self.num}), "
                             f"got {bottom[1].shape_string()}")
        self._gpu_margin.reshape((bottom[0].count(),))

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

    # --- GPU ---------------------------------------------------------------------------------
    def forward_gpu(self, bottom, top):
        count_labels_gpu(self, bottom[1], self.dim, None)
        margin = self._gpu_margin.mutable_gpu_data
        launch(_margin_kernel, bottom[0].count(), bottom[0].gpu_data,
               bottom[1].gpu_data, self.dim, margin)
        gpu.sum_into(bottom[0].count(), margin, float(self.num), top[0].mutable_gpu_data,
                     square=self.squared)

    def backward_gpu(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error(f"{self.type} layer cannot backpropagate to label inputs")
        if not propagate_down[0]:
            return
        loss_weight = top[0].cpu_diff[()]
        if self.squared:
            alpha = np.float32(loss_weight * 2 / self.num)
        else:
            alpha = np.float32(loss_weight / self.num)
        launch(_hinge_backward_kernel, bottom[0].count(), self._gpu_margin.gpu_data,
               bottom[1].gpu_data, self.dim, self.squared, alpha,
               bottom[0].mutable_gpu_diff)


@cuda.jit(device=True)
def _label_sign(index, labels, dim):
    """-1 at the item's true class, +1 elsewhere."""
    if index % dim == gpu.label_class(labels[index // dim], dim, 0, False):
        return np.float32(-1)
    return np.float32(1)


@cuda.jit(cache=True)
def _margin_kernel(n, x, labels, dim, margin):
    """margin = max(0, 1 + s x)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        value = np.float32(1) + _label_sign(index, labels, dim) * x[index]
        margin[index] = np.float32(0) if value < 0 else value


@cuda.jit(cache=True)
def _hinge_backward_kernel(n, margin, labels, dim, squared, alpha, diff):
    """L2: diff = s m alpha; L1: diff = s sign(m) alpha (alpha carries the 2 of L2)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        m = margin[index]
        if squared:
            factor = m
        elif m > 0:
            factor = np.float32(1)
        else:
            factor = np.float32(0)
        diff[index] = _label_sign(index, labels, dim) * factor * alpha
