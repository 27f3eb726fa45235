"""Swish: y = x * sigmoid(beta * x) (Caffe's SwishLayer; Ramachandran et al. 2017).

    forward:   s = sigmoid(beta x) = 0.5 tanh(0.5 beta x) + 0.5,   y = x * s
    backward:  dx = dy * (beta y + s (1 - beta y))

The sigmoid is kept from forward; backward reads it and the top data, of which the layer keeps
a copy when run in place, as a following in-place layer would overwrite it.
"""
import numpy as np

from pycaffe_cli.layers.base import NeuronLayer, register


@register("Swish")
class SwishLayer(NeuronLayer):
    """y = x sigmoid(beta x)."""

    def layer_setup(self, bottom, top):
        self.beta = np.float32(self.param.swish_param.beta)
        self.sigmoid = None
        self.saved_output = None

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
