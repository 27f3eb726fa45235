"""AbsVal: elementwise absolute value (Caffe's AbsValLayer).

    forward:   y = |x|
    backward:  dx = sign(x) * dy        (sign(0) = 0)

Backward needs the bottom data, so, as in Caffe, the layer refuses in-place computation.
"""
import numpy as np

from pycaffe_cli.layers.base import NeuronLayer, register


@register("AbsVal", v1="ABSVAL")
class AbsValLayer(NeuronLayer):
    """y = |x|."""

    def layer_setup(self, bottom, top):
        if top[0] is bottom[0]:
            raise self.error("AbsVal Layer does not allow in-place computation.")

    def forward_cpu(self, bottom, top):
        np.abs(bottom[0].data, out=top[0].data)

    def backward_cpu(self, top, propagate_down, bottom):
        if propagate_down[0]:
            np.multiply(np.sign(bottom[0].data), top[0].diff, out=bottom[0].diff)
