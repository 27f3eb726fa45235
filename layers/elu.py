"""ELU: exponential linear unit (Caffe's ELULayer; Clevert et al. 2015).

    forward:   y = max(x, 0) + alpha * (exp(min(x, 0)) - 1)
    backward:  dx = dy                 for x > 0
               dx = dy * (alpha + y)   for x <= 0

Backward reads the bottom and the top data. Run in place, Caffe reads the top for both (the
same sign only for alpha >= 0), and a following in-place layer overwrites that top too; this
layer keeps copies of its input and output then, so in-place gradients (in chains of in-place
layers too) equal the out-of-place ones.

GPU: one kernel per direction, the CPU's float32 arithmetic; in place, device copies of the
input and the output.
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.cuda.elementwise import DeviceCopy
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import NeuronLayer, register


@register("ELU")
class ELULayer(NeuronLayer):
    """y = x for x > 0, alpha (e^x - 1) otherwise."""

    saved = None

    def layer_setup(self, bottom, top):
        self.alpha = np.float32(self.param.elu_param.alpha)
        self._gpu_input = DeviceCopy()
        self._gpu_output = DeviceCopy()

    def forward_cpu(self, bottom, top):
        x = bottom[0].data
        in_place = top[0] is bottom[0]
        x_copy = x.copy() if in_place else None
        zero, one = np.float32(0), np.float32(1)
        negative = self.alpha * (np.exp(np.minimum(x, zero)) - one)
        np.add(np.maximum(x, zero), negative, out=top[0].data)
        self.saved = (x_copy, top[0].data.copy()) if in_place else None

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x, y = self.saved if top[0] is bottom[0] else (bottom[0].data, top[0].data)
        slope = np.where(x > 0, np.float32(1), self.alpha + y)
        np.multiply(top[0].diff, slope, out=bottom[0].diff)

    def forward_gpu(self, bottom, top):
        in_place = top[0] is bottom[0]
        x = self._gpu_input.keep_if(bottom[0].gpu_data, in_place)
        y = top[0].mutable_gpu_data
        launch(_elu_forward_kernel, x.size, x, y, self.alpha)
        self._gpu_output.keep_if(y, in_place)

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        in_place = top[0] is bottom[0]
        x = self._gpu_input.kept_or(bottom[0], in_place)
        y = self._gpu_output.kept_or(top[0], in_place)
        launch(_elu_backward_kernel, x.size, x, y, top[0].gpu_diff,
               bottom[0].mutable_gpu_diff, self.alpha)


# --- GPU ------------------------------------------------------------------------------------
@cuda.jit(cache=True)
def _elu_forward_kernel(n, x, y, alpha):
    """y = x if x > 0 else alpha * (e^x - 1) (the CPU's sum with its zero term left out)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        value = x[index]
        if value > 0:
            y[index] = value
        else:
            y[index] = alpha * (math.exp(value) - np.float32(1))


@cuda.jit(cache=True)
def _elu_backward_kernel(n, x, y, dy, dx, alpha):
    """dx = dy if x > 0 else dy * (alpha + y)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        slope = np.float32(1) if x[index] > 0 else alpha + y[index]
        dx[index] = dy[index] * slope
