"""BNLL: binomial normal log likelihood, i.e. softplus (Caffe's BNLLLayer).

    forward:   y = log(1 + exp(x)), evaluated as x + log(1 + exp(-x)) for x > 0
    backward:  dx = dy * e / (e + 1) with e = exp(min(x, 50))

Caffe's threshold 50 keeps exp finite in backward. Backward needs the bottom data; Caffe reads
the (overwritten) top when run in place, while this layer keeps a copy of the input then, so
in-place gradients are the true ones.
"""
import numpy as np

from pycaffe_cli.layers.base import NeuronLayer, register

BNLL_THRESHOLD = np.float32(50)


@register("BNLL", v1="BNLL")
class BNLLLayer(NeuronLayer):
    """y = log(1 + exp(x))."""

    saved_input = None

    def forward_cpu(self, bottom, top):
        x = bottom[0].data
        self.saved_input = x.copy() if top[0] is bottom[0] else None
        # Caffe evaluates 1. + exp(.) in double; both branches are max(x, 0) + log(1 + e^-|x|)
        x64 = x.astype(np.float64)
        top[0].data[...] = np.maximum(x64, 0.0) + np.log(1.0 + np.exp(-np.abs(x64)))

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = self.saved_input if top[0] is bottom[0] else bottom[0].data
        e = np.exp(np.minimum(x, BNLL_THRESHOLD))
        # Caffe's order: (dy * e) in float, then divided by (e + 1.) in double
        numerator = (top[0].diff * e).astype(np.float64)
        bottom[0].diff[...] = numerator / (e.astype(np.float64) + 1.0)
