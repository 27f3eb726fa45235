"""AbsVal: elementwise absolute value (Caffe's AbsValLayer).

    forward:   y = |x|
    backward:  dx = sign(x) * dy        (sign(0) = 0)

Backward needs the bottom data, so, as in Caffe, the layer refuses in-place computation.

GPU: one kernel per direction, exact as the CPU's (sign(NaN) is NaN there too).
"""
import numpy as np
from numba import cuda

from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import NeuronLayer, register


@register("AbsVal", v1="ABSVAL")
class AbsValLayer(NeuronLayer):
    """y = |x|."""

    in_place_ok = False

    def layer_setup(self, bottom, top):
        if top[0] is bottom[0]:
            raise self.error("AbsVal Layer does not allow in-place computation.")

    def forward_cpu(self, bottom, top):
        np.abs(bottom[0].data, out=top[0].data)

    def backward_cpu(self, top, propagate_down, bottom):
        if propagate_down[0]:
            np.multiply(np.sign(bottom[0].data), top[0].diff, out=bottom[0].diff)

    def forward_gpu(self, bottom, top):
        x = bottom[0].gpu_data
        launch(_absval_forward_kernel, x.size, x, top[0].mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        if propagate_down[0]:
            x = bottom[0].gpu_data
            launch(_absval_backward_kernel, x.size, x, top[0].gpu_diff,
                   bottom[0].mutable_gpu_diff)


# --- GPU ------------------------------------------------------------------------------------
@cuda.jit(cache=True)
def _absval_forward_kernel(n, x, y):
    """y = |x|."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        y[index] = abs(x[index])


@cuda.jit(cache=True)
def _absval_backward_kernel(n, x, dy, dx):
    """dx = sign(x) * dy, sign(0) = 0 and sign(NaN) = NaN as numpy's."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        value = x[index]
        if value > 0:
            sign = np.float32(1)
        elif value < 0:
            sign = np.float32(-1)
        elif value == 0:
            sign = np.float32(0)
        else:
            sign = value
        dx[index] = sign * dy[index]
