"""Threshold: a step function (Caffe's ThresholdLayer).

    forward:   y = 1 if x > threshold else 0
    backward:  none; Caffe aborts (NOT_IMPLEMENTED) when asked for a gradient, and so do we,
               with a CaffeError

Unlike Caffe, force_backward does not force a gradient into the bottom (Caffe would abort), so
force_backward nets with a Threshold layer run. Forward only, so in-place use is safe.
"""
import numpy as np

from pycaffe_cli.layers.base import NeuronLayer, register


@register("Threshold", v1="THRESHOLD")
class ThresholdLayer(NeuronLayer):
    """y = [x > threshold]."""

    def layer_setup(self, bottom, top):
        self.threshold = np.float32(self.param.threshold_param.threshold)

    def allow_force_backward(self, bottom_index):
        return False

    def forward_cpu(self, bottom, top):
        np.greater(bottom[0].data, self.threshold, out=top[0].data, casting="unsafe")

    def backward_cpu(self, top, propagate_down, bottom):
        if any(propagate_down):
            raise self.error("Threshold layer has no backward pass (the step function is not "
                             "differentiable); stop gradients reaching it, e.g. with "
                             "propagate_down: false")
