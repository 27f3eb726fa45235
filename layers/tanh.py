"""TanH: hyperbolic tangent (Caffe's TanHLayer).

    forward:   y = tanh(x)
    backward:  dx = dy * (1 - y^2)

Backward uses only the top data, so in-place use is safe.
"""
import numpy as np

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
