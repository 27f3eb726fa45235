"""Exp: y = base^(shift + scale * x) (Caffe's ExpLayer).

With base = -1 (the default) meaning e, Caffe precomputes

    inner = ln(base) * scale,   outer = base^shift  (e^shift for base -1; 1 when shift is 0)
    forward:   y = outer * exp(inner * x)
    backward:  dx = dy * y * inner

Backward reads only the top data; run in place the layer keeps a copy of it, as a following
in-place layer would overwrite it.
"""
import math

import numpy as np

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
