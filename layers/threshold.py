"""Threshold: a step function (Caffe's ThresholdLayer).

    forward:   y = 1 if x > threshold else 0
    backward:  none; Caffe aborts (NOT_IMPLEMENTED) when asked for a gradient, and so do we,
               with a CaffeError

Unlike Caffe, force_backward does not force a gradient into the bottom (Caffe would abort), so
force_backward nets with a Threshold layer run. Forward only, so in-place use is safe.

GPU: one forward kernel; the GPU backward is the CPU one (it touches no data: a no-op, or the
error above).
"""
import numpy as np
from numba import cuda

from pycaffe_cli.cuda.launch import launch
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

    def forward_gpu(self, bottom, top):
        x = bottom[0].gpu_data
        launch(_threshold_forward_kernel, x.size, x, top[0].mutable_gpu_data, self.threshold)

    def backward_gpu(self, top, propagate_down, bottom):
        self.backward_cpu(top, propagate_down, bottom)


# --- GPU ------------------------------------------------------------------------------------
@cuda.jit(cache=True)
def _threshold_forward_kernel(n, x, y, threshold):
    """y = 1 if x > threshold else 0 (``x`` may be ``y``)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        y[index] = np.float32(1) if x[index] > threshold else np.float32(0)
