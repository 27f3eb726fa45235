"""Log: y = log_base(shift + scale * x) (Caffe's LogLayer).

With base = -1 (the default) meaning e, Caffe precomputes ``base_scale = 1 / ln(base)``:

    forward:   y = base_scale * ln(shift + scale * x)
    backward:  dx = dy * (scale / ln(base)) / (shift + scale * x)

Non-positive ``shift + scale * x`` gives NaN / -inf, unchecked, as in Caffe. Backward needs the
bottom data; Caffe reads the (overwritten) top when run in place, while this layer keeps a copy
of the input then, so in-place gradients are the true ones.
"""
import numpy as np

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
