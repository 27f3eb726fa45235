"""ReLU: rectified linear unit, optionally leaky (Caffe's ReLULayer).

    forward:   y = max(x, 0) + negative_slope * min(x, 0)
    backward:  dx = dy * (1 if x > 0 else negative_slope)

Backward reads the bottom data; run in place that is the top data, whose sign matches x for
any negative_slope >= 0, so in-place use gives the same gradient (as in Caffe).
"""
import numpy as np

from pycaffe_cli.layers.base import NeuronLayer, register


@register("ReLU", v1="RELU")
class ReLULayer(NeuronLayer):
    """y = max(x, 0) + negative_slope * min(x, 0)."""

    def layer_setup(self, bottom, top):
        self.negative_slope = np.float32(self.param.relu_param.negative_slope)

    def forward_cpu(self, bottom, top):
        x = bottom[0].data
        if self.negative_slope == 0:
            np.maximum(x, np.float32(0), out=top[0].data)
        else:
            top[0].data[...] = np.where(x > 0, x, x * self.negative_slope)

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = bottom[0].data
        if self.negative_slope == 0:
            slope = x > 0
        else:
            slope = (x > 0) + self.negative_slope * (x <= 0)
        np.multiply(top[0].diff, slope, out=bottom[0].diff)
