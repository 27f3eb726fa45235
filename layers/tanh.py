"""TanH: hyperbolic tangent (Caffe's TanHLayer).

    forward:   y = tanh(x)
    backward:  dx = dy * (1 - y^2)

Backward uses only the top data, so in-place use is safe.

GPU: one kernel per direction, float32 ``tanhf`` in the forward.
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import NeuronLayer, register


@register("TanH", v1="TANH")
class TanHLayer(NeuronLayer):
    """y = tanh(x)."""

    def forward_cpu(self, bottom, top):
        np.tanh(bottom[0].data, out=top[0].data)

    def backward_cpu(self, top, propagate_down, bottom):
        if propagate_down[0]:
            y = top[0].data
            bottom[0].diff[...] = top[0].diff * (np.float32(1) - y * y)

    def forward_gpu(self, bottom, top):
        x = bottom[0].gpu_data
        launch(_tanh_forward_kernel, x.size, x, top[0].mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        if propagate_down[0]:
            y = top[0].gpu_data
            launch(_tanh_backward_kernel, y.size, y, top[0].gpu_diff,
                   bottom[0].mutable_gpu_diff)


# --- GPU ------------------------------------------------------------------------------------
@cuda.jit(cache=True)
def _tanh_forward_kernel(n, x, y):
    """y = tanh(x) (``x`` may be ``y``)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        y[index] = math.tanh(x[index])


@cuda.jit(cache=True)
def _tanh_backward_kernel(n, y, dy, dx):
    """dx = dy * (1 - y^2)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        value = y[index]
        dx[index] = dy[index] * (np.float32(1) - value * value)
