"""Sigmoid (Caffe's SigmoidLayer).

    forward:   y = 1 / (1 + exp(-x)), computed as 0.5 * tanh(0.5 x) + 0.5 (no overflow)
    backward:  dx = dy * y * (1 - y)

Backward uses only the top data, so in-place use is safe.

GPU: one kernel per direction. The forward evaluates the sigmoid in float32 as
``1 / (1 + e^-x)`` (``e^x / (1 + e^x)`` for x < 0), within a few ulps of the CPU's rounded
double-precision tanh form.
"""
import numpy as np
from numba import cuda

from pycaffe_cli.cuda.elementwise import sigmoid
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import NeuronLayer, register


@register("Sigmoid", v1="SIGMOID")
class SigmoidLayer(NeuronLayer):
    """y = sigmoid(x)."""

    def forward_cpu(self, bottom, top):
        # Caffe evaluates the tanh form in double precision before rounding to float
        x = bottom[0].data.astype(np.float64)
        top[0].data[...] = 0.5 * np.tanh(0.5 * x) + 0.5

    def backward_cpu(self, top, propagate_down, bottom):
        if propagate_down[0]:
            y = top[0].data
            bottom[0].diff[...] = top[0].diff * y * (np.float32(1) - y)

    def forward_gpu(self, bottom, top):
        x = bottom[0].gpu_data
        launch(_sigmoid_forward_kernel, x.size, x, top[0].mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        if propagate_down[0]:
            y = top[0].gpu_data
            launch(_sigmoid_backward_kernel, y.size, y, top[0].gpu_diff,
                   bottom[0].mutable_gpu_diff)


# --- GPU ------------------------------------------------------------------------------------
@cuda.jit(cache=True)
def _sigmoid_forward_kernel(n, x, y):
    """y = sigmoid(x) (``x`` may be ``y``)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        y[index] = sigmoid(x[index])


@cuda.jit(cache=True)
def _sigmoid_backward_kernel(n, y, dy, dx):
    """dx = dy * y * (1 - y)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        value = y[index]
        dx[index] = dy[index] * value * (np.float32(1) - value)
