"""Swish: y = x * sigmoid(beta * x) (Caffe's SwishLayer; Ramachandran et al. 2017).

    forward:   s = sigmoid(beta x) = 0.5 tanh(0.5 beta x) + 0.5,   y = x * s
    backward:  dx = dy * (beta y + s (1 - beta y))

The sigmoid is kept from forward; backward reads it and the top data, of which the layer keeps
a copy when run in place, as a following in-place layer would overwrite it.

GPU: one kernel per direction in float32; the forward keeps the sigmoid in a device buffer
(``sigmoid`` in float32 as the Sigmoid layer's GPU path, within a few ulps of the CPU's), and
in place a device copy of the output.
"""
import numpy as np
from numba import cuda

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda.elementwise import DeviceCopy, sigmoid
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import NeuronLayer, register


@register("Swish")
class SwishLayer(NeuronLayer):
    """y = x sigmoid(beta x)."""

    def layer_setup(self, bottom, top):
        self.beta = np.float32(self.param.swish_param.beta)
        self.sigmoid = None
        self.saved_output = None
        self._gpu_sigmoid = Blob()
        self._gpu_output = DeviceCopy()

    def forward_cpu(self, bottom, top):
        x = bottom[0].data
        # Caffe's sigmoid layer evaluates the tanh form in double and rounds to float
        z = (self.beta * x).astype(np.float64)
        self.sigmoid = (0.5 * np.tanh(0.5 * z) + 0.5).astype(np.float32)
        np.multiply(x, self.sigmoid, out=top[0].data)
        self.saved_output = top[0].data.copy() if top[0] is bottom[0] else None

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        y = self.saved_output if top[0] is bottom[0] else top[0].data
        beta_y = (self.beta * y).astype(np.float64)
        # Caffe mixes in the double literal 1., so the bracket is evaluated in double
        factor = beta_y + self.sigmoid * (1.0 - beta_y)
        bottom[0].diff[...] = top[0].diff * factor

    def forward_gpu(self, bottom, top):
        x = bottom[0].gpu_data
        self._gpu_sigmoid.reshape((x.size,))
        y = top[0].mutable_gpu_data
        launch(_swish_forward_kernel, x.size, x, self._gpu_sigmoid.mutable_gpu_data, y, self.beta)
        self._gpu_output.keep_if(y, top[0] is bottom[0])

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        y = self._gpu_output.kept_or(top[0], top[0] is bottom[0])
        launch(_swish_backward_kernel, y.size, y, self._gpu_sigmoid.gpu_data,
               top[0].gpu_diff, bottom[0].mutable_gpu_diff, self.beta)


# --- GPU ------------------------------------------------------------------------------------
@cuda.jit(cache=True)
def _swish_forward_kernel(n, x, s, y, beta):
    """s = sigmoid(beta x), y = x s (``x`` may be ``y``)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        value = x[index]
        gate = sigmoid(beta * value)
        s[index] = gate
        y[index] = value * gate


@cuda.jit(cache=True)
def _swish_backward_kernel(n, y, s, dy, dx, beta):
    """dx = dy * (beta y + s (1 - beta y))."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        beta_y = beta * y[index]
        dx[index] = dy[index] * (beta_y + s[index] * (np.float32(1) - beta_y))
