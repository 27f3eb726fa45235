"""BNLL: binomial normal log likelihood, i.e. softplus (Caffe's BNLLLayer).

    forward:   y = log(1 + exp(x)), evaluated as x + log(1 + exp(-x)) for x > 0
    backward:  dx = dy * e / (e + 1) with e = exp(min(x, 50))

Caffe's threshold 50 keeps exp finite in backward. Backward needs the bottom data; Caffe reads
the (overwritten) top when run in place, while this layer keeps a copy of the input then, so
in-place gradients are the true ones.

GPU: one kernel per direction, in float32: the forward as max(x, 0) + log1p(e^-|x|) (within a
few ulps of the CPU's double-precision value), the backward as the CPU's. In place, the input
is kept in a device copy.
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.cuda.elementwise import DeviceCopy
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import NeuronLayer, register

BNLL_THRESHOLD = np.float32(50)


@register("BNLL", v1="BNLL")
class BNLLLayer(NeuronLayer):
    """y = log(1 + exp(x))."""

    saved_input = None

    def layer_setup(self, bottom, top):
        self._gpu_input = DeviceCopy()

    def forward_cpu(self, bottom, top):
        x = bottom[0].data
        self.saved_input = x.copy() if top[0] is bottom[0] else None
        # Caffe evaluates 1. + exp(.) in double; both branches are max(x, 0) + log(1 + e^-|x|)
        x64 = x.astype(np.float64)
        top[0].data[...] = np.maximum(x64, 0.0) + np.log(1.0 + np.exp(-np.abs(x64)))

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = self.saved_input if top[0] is bottom[0] else bottom[0].data
        e = np.exp(np.minimum(x, BNLL_THRESHOLD))
        # Caffe's order: (dy * e) in float, then divided by (e + 1.) in double
        numerator = (top[0].diff * e).astype(np.float64)
        bottom[0].diff[...] = numerator / (e.astype(np.float64) + 1.0)

    def forward_gpu(self, bottom, top):
        x = self._gpu_input.keep_if(bottom[0].gpu_data, top[0] is bottom[0])
        launch(_bnll_forward_kernel, x.size, x, top[0].mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = self._gpu_input.kept_or(bottom[0], top[0] is bottom[0])
        launch(_bnll_backward_kernel, x.size, x, top[0].gpu_diff,
               bottom[0].mutable_gpu_diff, BNLL_THRESHOLD)


# --- GPU ------------------------------------------------------------------------------------
@cuda.jit(cache=True)
def _bnll_forward_kernel(n, x, y):
    """y = max(x, 0) + log(1 + e^-|x|)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        value = x[index]
        positive = value if value > 0 else np.float32(0)
        y[index] = positive + math.log1p(math.exp(-abs(value)))


@cuda.jit(cache=True)
def _bnll_backward_kernel(n, x, dy, dx, threshold):
    """dx = dy * e / (e + 1), e = exp(min(x, threshold))."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        value = x[index]
        e = math.exp(threshold if value > threshold else value)
        dx[index] = dy[index] * e / (e + np.float32(1))
