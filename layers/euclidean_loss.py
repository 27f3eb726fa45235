"""EuclideanLoss: half mean squared distance (Caffe's EuclideanLossLayer).

With d = a - b over N = a.shape[0] items:

    loss = sum(d^2) / N / 2
    da   = +loss_weight / N * d,     db = -loss_weight / N * d

Both bottoms may receive gradients (force_backward included). In GPU mode d is kept on the
device, sum(d^2) is added there in float64 and written into the loss top, and the gradients
are scaled copies of d.
"""
import numpy as np

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda import math as gpu_math
from pycaffe_cli.layers.base import LossLayer, register
from pycaffe_cli.layers.kernels.cuda import loss as gpu


@register("EuclideanLoss", v1="EUCLIDEAN_LOSS")
class EuclideanLossLayer(LossLayer):
    """sum((a - b)^2) / (2 N) for predictions a and targets b of equal size per item."""

    def layer_setup(self, bottom, top):
        self._gpu_difference = Blob()  # GPU: a - b, kept for backward (Caffe's diff_)

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        if bottom[0].count(1) != bottom[1].count(1):
            raise self.error(f"inputs must have the same dimension: "
                             f"{bottom[0].shape_string()} vs {bottom[1].shape_string()}")
        self._gpu_difference.reshape((bottom[0].count(),))

    def forward_cpu(self, bottom, top):
        self.difference = bottom[0].flat_data - bottom[1].flat_data
        total = np.dot(self.difference, self.difference)
        top[0].data[...] = total / np.float32(bottom[0].num) / np.float32(2)

    def backward_cpu(self, top, propagate_down, bottom):
        for i, sign in ((0, 1.0), (1, -1.0)):
            if propagate_down[i]:
                alpha = np.float32(sign * top[0].diff[()] / bottom[i].num)
                np.multiply(self.difference, alpha, out=bottom[i].flat_diff)

    def forward_gpu(self, bottom, top):
        count = bottom[0].count()
        difference = self._gpu_difference.mutable_gpu_data
        gpu_math.sub(count, bottom[0].gpu_data, bottom[1].gpu_data,
                     difference)
        gpu.sum_into(count, difference, 2.0 * bottom[0].num, top[0].mutable_gpu_data, square=True)

    def backward_gpu(self, top, propagate_down, bottom):
        for i, sign in ((0, 1.0), (1, -1.0)):
            if propagate_down[i]:
                alpha = np.float32(sign * top[0].cpu_diff[()] / bottom[i].num)
                gpu_math.axpby(bottom[i].count(), alpha,
                               self._gpu_difference.gpu_data, 0.0,
                               bottom[i].mutable_gpu_diff)

    def allow_force_backward(self, bottom_index):
        return True
