"""ReLU: rectified linear unit, optionally leaky (Caffe's ReLULayer).

    forward:   y = max(x, 0) + negative_slope * min(x, 0)
    backward:  dx = dy * (1 if x > 0 else negative_slope)

Backward reads the bottom data; run in place that is the top data, whose sign matches x for
any negative_slope >= 0, so in-place use gives the same gradient (as in Caffe).

The element loops are numba kernels over flat views, parallel and in one pass (numpy's
``maximum`` ran at a sixth of the speed and the backward made a temporary mask). They do the
arithmetic numpy did, so the numbers are the same to the bit: max(x, 0) gives +0 for -0 and
keeps NaN; the slope factor is ``(x > 0) + negative_slope * (x <= 0)`` in float32.

GPU: the same per-element bodies (``*_at_py``), compiled as CUDA device functions and driven
by one grid-stride kernel per direction, so both modes give the same bits.
"""
import numpy as np
from numba import cuda, float32, njit, prange

from pycaffe_cli.cuda.device import device_function
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import NeuronLayer, register


PARALLEL_MIN = 1 << 17  # elements: below this, starting the threads costs more than they save


def relu_at_py(x, y, i):
    """y[i] = max(x[i], 0)."""
    value = x[i]
    y[i] = float32(0) if value <= 0 else value


def leaky_relu_at_py(x, y, slope, i):
    """y[i] = x[i] if positive, else x[i] * slope."""
    value = x[i]
    y[i] = value if value > 0 else value * slope


def relu_grad_at_py(x, dy, dx, i):
    """dx[i] = dy[i] * [x[i] > 0]."""
    dx[i] = dy[i] * (float32(1) if x[i] > 0 else float32(0))


def leaky_relu_grad_at_py(x, dy, dx, slope, i):
    """dx[i] = dy[i] * ([x[i] > 0] + slope * [x[i] <= 0])."""
    value = x[i]
    positive = float32(1) if value > 0 else float32(0)
    negative = float32(1) if value <= 0 else float32(0)
    dx[i] = dy[i] * (positive + slope * negative)


_relu = njit(cache=True, inline="always")(relu_at_py)
_leaky_relu = njit(cache=True, inline="always")(leaky_relu_at_py)
_relu_grad = njit(cache=True, inline="always")(relu_grad_at_py)
_leaky_relu_grad = njit(cache=True, inline="always")(leaky_relu_grad_at_py)


@njit(cache=True, parallel=True, nogil=True)
def relu_forward(x, y):
    """y = max(x, 0) for flat arrays (``x`` may be ``y``)."""
    if x.size < PARALLEL_MIN:
        for i in range(x.size):
            _relu(x, y, i)
    else:
        for i in prange(x.size):
            _relu(x, y, i)


@njit(cache=True, parallel=True, nogil=True)
def leaky_relu_forward(x, y, slope):
    """y = x if x > 0 else x * slope (float32 ``slope``)."""
    if x.size < PARALLEL_MIN:
        for i in range(x.size):
            _leaky_relu(x, y, slope, i)
    else:
        for i in prange(x.size):
            _leaky_relu(x, y, slope, i)


@njit(cache=True, parallel=True, nogil=True)
def relu_backward(x, dy, dx):
    """dx = dy * (x > 0)."""
    if x.size < PARALLEL_MIN:
        for i in range(x.size):
            _relu_grad(x, dy, dx, i)
    else:
        for i in prange(x.size):
            _relu_grad(x, dy, dx, i)


@njit(cache=True, parallel=True, nogil=True)
def leaky_relu_backward(x, dy, dx, slope):
    """dx = dy * ((x > 0) + slope * (x <= 0))."""
    if x.size < PARALLEL_MIN:
        for i in range(x.size):
            _leaky_relu_grad(x, dy, dx, slope, i)
    else:
        for i in prange(x.size):
            _leaky_relu_grad(x, dy, dx, slope, i)


@register("ReLU", v1="RELU")
class ReLULayer(NeuronLayer):
    """y = max(x, 0) + negative_slope * min(x, 0)."""

    def layer_setup(self, bottom, top):
        self.negative_slope = np.float32(self.param.relu_param.negative_slope)

    def forward_cpu(self, bottom, top):
        x = bottom[0].data.reshape(-1)
        y = top[0].data.reshape(-1)
        if self.negative_slope == 0:
            relu_forward(x, y)
        else:
            leaky_relu_forward(x, y, self.negative_slope)

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = bottom[0].data.reshape(-1)
        dy = top[0].diff.reshape(-1)
        dx = bottom[0].diff.reshape(-1)
        if self.negative_slope == 0:
            relu_backward(x, dy, dx)
        else:
            leaky_relu_backward(x, dy, dx, self.negative_slope)

    def forward_gpu(self, bottom, top):
        x = bottom[0].gpu_data
        launch(_relu_forward_kernel, x.size, x, top[0].mutable_gpu_data, self.negative_slope)

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = bottom[0].gpu_data
        launch(_relu_backward_kernel, x.size, x, top[0].gpu_diff,
               bottom[0].mutable_gpu_diff, self.negative_slope)


# --- GPU ------------------------------------------------------------------------------------
_relu_cuda = device_function(relu_at_py)
_leaky_relu_cuda = device_function(leaky_relu_at_py)
_relu_grad_cuda = device_function(relu_grad_at_py)
_leaky_relu_grad_cuda = device_function(leaky_relu_grad_at_py)


@cuda.jit(cache=True)
def _relu_forward_kernel(n, x, y, slope):
    """y = max(x, 0) + slope * min(x, 0) (``x`` may be ``y``)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        if slope == 0:
            _relu_cuda(x, y, index)
        else:
            _leaky_relu_cuda(x, y, slope, index)


@cuda.jit(cache=True)
def _relu_backward_kernel(n, x, dy, dx, slope):
    """dx = dy * ([x > 0] + slope * [x <= 0]) (``dy`` may be ``dx``)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        if slope == 0:
            _relu_grad_cuda(x, dy, dx, index)
        else:
            _leaky_relu_grad_cuda(x, dy, dx, slope, index)
