"""Log: y = log_base(shift + scale * x) (Caffe's LogLayer).

With base = -1 (the default) meaning e, Caffe precomputes ``base_scale = 1 / ln(base)``:

    forward:   y = base_scale * ln(shift + scale * x)
    backward:  dx = dy * (scale / ln(base)) / (shift + scale * x)

Non-positive ``shift + scale * x`` gives NaN / -inf, unchecked, as in Caffe. Backward needs the
bottom data; Caffe reads the (overwritten) top when run in place, while this layer keeps a copy
of the input then, so in-place gradients are the true ones.

GPU: one kernel per direction, the CPU's float32 arithmetic (the steps the CPU skips, scaling by
1 and shifting by 0, change nothing); in place, a device copy of the input.
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.cuda.elementwise import DeviceCopy
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import NeuronLayer, register
from pycaffe_cli.layers.exp import log_of_base


@register("Log")
class LogLayer(NeuronLayer):
    """y = log_base(shift + scale x)."""

    saved_input = None

    def layer_setup(self, bottom, top):
        p = self.param.log_param
        log_base = log_of_base(self, float(np.float32(p.base)))
        with np.errstate(divide="ignore"):
            self.base_scale = np.float32(1) / log_base
        if not np.isfinite(self.base_scale):
            raise self.error(f"1 / log(base) = 1 / log({p.base:g}) is not finite (base 1 "
                             "has no logarithm)")
        self.input_scale = np.float32(p.scale)
        self.input_shift = np.float32(p.shift)
        self.backward_num_scale = self.input_scale / log_base
        self._gpu_input = DeviceCopy()

    def _argument(self, x):
        """shift + scale * x in float32, with Caffe's skipped no-op steps."""
        t = x * self.input_scale if self.input_scale != 1 else x.copy()
        if self.input_shift != 0:
            t += self.input_shift
        return t

    def forward_cpu(self, bottom, top):
        x = bottom[0].data
        self.saved_input = x.copy() if top[0] is bottom[0] else None
        y = top[0].data
        with np.errstate(divide="ignore", invalid="ignore"):
            np.log(self._argument(x), out=y)
        if self.base_scale != 1:
            y *= self.base_scale

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = self.saved_input if top[0] is bottom[0] else bottom[0].data
        with np.errstate(divide="ignore", invalid="ignore"):
            g = np.float32(1) / self._argument(x)
            if self.backward_num_scale != 1:
                g *= self.backward_num_scale
            np.multiply(top[0].diff, g, out=bottom[0].diff)

    def forward_gpu(self, bottom, top):
        x = self._gpu_input.keep_if(bottom[0].gpu_data, top[0] is bottom[0])
        launch(_log_forward_kernel, x.size, x, top[0].mutable_gpu_data, self.input_scale,
               self.input_shift, self.base_scale)

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = self._gpu_input.kept_or(bottom[0], top[0] is bottom[0])
        launch(_log_backward_kernel, x.size, x, top[0].gpu_diff,
               bottom[0].mutable_gpu_diff, self.input_scale, self.input_shift,
               self.backward_num_scale)


# --- GPU ------------------------------------------------------------------------------------
@cuda.jit(cache=True)
def _log_forward_kernel(n, x, y, scale, shift, base_scale):
    """y = base_scale * ln(shift + scale * x)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        y[index] = math.log(x[index] * scale + shift) * base_scale


@cuda.jit(cache=True)
def _log_backward_kernel(n, x, dy, dx, scale, shift, num_scale):
    """dx = dy * num_scale / (shift + scale * x)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        g = np.float32(1) / (x[index] * scale + shift)
        dx[index] = dy[index] * (g * num_scale)
