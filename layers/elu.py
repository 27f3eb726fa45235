"""ELU: exponential linear unit (Caffe's ELULayer; Clevert et al. 2015).

    forward:   y = max(x, 0) + alpha * (exp(min(x, 0)) - 1)
    backward:  dx = dy                 for x > 0
               dx = dy * (alpha + y)   for x <= 0

Backward reads the bottom and the top data. Run in place, Caffe reads the top for both (the
same sign only for alpha >= 0), and a following in-place layer overwrites that top too; this
layer keeps copies of its input and output then, so in-place gradients (in chains of in-place
layers too) equal the out-of-place ones.
"""
import numpy as np

from pycaffe_cli.layers.base import NeuronLayer, register


@register("ELU")
class ELULayer(NeuronLayer):
    """y = x for x > 0, alpha (e^x - 1) otherwise."""

    saved = None

    def layer_setup(self, bottom, top):
        self.alpha = np.float32(self.param.elu_param.alpha)

    def forward_cpu(self, bottom, top):
        x = bottom[0].data
        in_place = top[0] is bottom[0]
        x_copy = x.copy() if in_place else None
        zero, one = np.float32(0), np.float32(1)
        negative = self.alpha * (np.exp(np.minimum(x, zero)) - one)
        np.add(np.maximum(x, zero), negative, out=top[0].data)
        self.saved = (x_copy, top[0].data.copy()) if in_place else None

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x, y = self.saved if top[0] is bottom[0] else (bottom[0].data, top[0].data)
        slope = np.where(x > 0, np.float32(1), self.alpha + y)
        np.multiply(top[0].diff, slope, out=bottom[0].diff)
