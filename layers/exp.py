"""Exp: y = base^(shift + scale * x) (Caffe's ExpLayer).

With base = -1 (the default) meaning e, Caffe precomputes

    inner = ln(base) * scale,   outer = base^shift  (e^shift for base -1; 1 when shift is 0)
    forward:   y = outer * exp(inner * x)
    backward:  dx = dy * y * inner

Backward reads only the top data; run in place the layer keeps a copy of it, as a following
in-place layer would overwrite it.

GPU: one kernel per direction, the CPU's float32 arithmetic (multiplying by a scale of 1, which
the CPU skips, changes nothing); in place, a device copy of the output.
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.cuda.elementwise import DeviceCopy
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import NeuronLayer, register

E_BASE = -1.0


def log_of_base(layer, base):
    """ln(base) in float32 (exactly 1 for base -1, meaning e), with Caffe's checks."""
    if base == E_BASE:
        return np.float32(1)
    if not base > 0:
        raise layer.error(f"base must be strictly positive (or -1 for e), got {base:g}")
    log_base = np.float32(math.log(base))
    if not np.isfinite(log_base):
        raise layer.error(f"log(base) = log({base:g}) = {log_base} is not finite")
    return log_base


@register("Exp", v1="EXP")
class ExpLayer(NeuronLayer):
    """y = base^(shift + scale x)."""

    saved_output = None

    def layer_setup(self, bottom, top):
        p = self.param.exp_param
        base = np.float32(p.base)
        scale, shift = np.float32(p.scale), np.float32(p.shift)
        self.inner_scale = log_of_base(self, float(base)) * scale
        if shift == 0:
            self.outer_scale = np.float32(1)
        elif base == E_BASE:
            self.outer_scale = np.float32(math.exp(shift))
        else:
            self.outer_scale = np.float32(float(base) ** float(shift))
        self._gpu_output = DeviceCopy()

    def forward_cpu(self, bottom, top):
        x = bottom[0].data
        y = top[0].data
        with np.errstate(over="ignore"):  # overflow gives inf, as in Caffe
            if self.inner_scale == 1:
                np.exp(x, out=y)
            else:
                np.exp(self.inner_scale * x, out=y)
            if self.outer_scale != 1:
                y *= self.outer_scale
        self.saved_output = y.copy() if top[0] is bottom[0] else None

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dx = bottom[0].diff
        y = self.saved_output if top[0] is bottom[0] else top[0].data
        np.multiply(y, top[0].diff, out=dx)
        if self.inner_scale != 1:
            dx *= self.inner_scale

    def forward_gpu(self, bottom, top):
        x = bottom[0].gpu_data
        y = top[0].mutable_gpu_data
        launch(_exp_forward_kernel, x.size, x, y, self.inner_scale, self.outer_scale)
        self._gpu_output.keep_if(y, top[0] is bottom[0])

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        y = self._gpu_output.kept_or(top[0], top[0] is bottom[0])
        launch(_exp_backward_kernel, y.size, y, top[0].gpu_diff,
               bottom[0].mutable_gpu_diff, self.inner_scale)


# --- GPU ------------------------------------------------------------------------------------
@cuda.jit(cache=True)
def _exp_forward_kernel(n, x, y, inner_scale, outer_scale):
    """y = outer_scale * exp(inner_scale * x) (``x`` may be ``y``)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        y[index] = math.exp(inner_scale * x[index]) * outer_scale


@cuda.jit(cache=True)
def _exp_backward_kernel(n, y, dy, dx, inner_scale):
    """dx = y * dy * inner_scale."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        dx[index] = y[index] * dy[index] * inner_scale
