"""Sigmoid (Caffe's SigmoidLayer).

    forward:   y = 1 / (1 + exp(-x)), computed as 0.5 * tanh(0.5 x) + 0.5 (no overflow)
    backward:  dx = dy * y * (1 - y)

Backward uses only the top data, so in-place use is safe.
"""
import numpy as np

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
