"""Power: y = (shift + scale * x)^power (Caffe's PowerLayer).

With ``diff_scale = power * scale``:

    forward:   y = (shift + scale * x)^power; a constant when diff_scale is 0
               (1 for power 0, shift^power for scale 0)
    backward:  dx = dy * diff_scale * (shift + scale * x)^(power - 1), evaluated as Caffe does:
               diff_scale                              if diff_scale is 0 or power is 1
               diff_scale * (scale * x + shift)        if power is 2
               power * y / x                           if shift is 0
               diff_scale * y / (shift + scale * x)    otherwise

So, as in Caffe, the shift-0 and general forms give NaN where the base is 0 (0 / 0), and
non-integer powers of negative bases give NaN. Backward reads the bottom and the top data; Caffe
reads the (overwritten) top for both when run in place, and a following in-place layer
overwrites that top too, while this layer keeps copies of its input and output then.
"""
import numpy as np

from pycaffe_cli.layers.base import NeuronLayer, register


@register("Power", v1="POWER")
class PowerLayer(NeuronLayer):
    """y = (shift + scale x)^power."""

    saved = None

    def layer_setup(self, bottom, top):
        p = self.param.power_param
        self.power = np.float32(p.power)
        self.scale = np.float32(p.scale)
        self.shift = np.float32(p.shift)
        self.diff_scale = self.power * self.scale

    def _base(self, x):
        """shift + scale * x in float32, with Caffe's skipped no-op steps (a new array)."""
        t = x * self.scale if self.scale != 1 else x.copy()
        if self.shift != 0:
            t += self.shift
        return t

    def forward_cpu(self, bottom, top):
        y = top[0].data
        self.saved = None
        if self.diff_scale == 0:
            with np.errstate(all="ignore"):
                y[...] = 1 if self.power == 0 else self.shift ** self.power
            return
        x = bottom[0].data
        in_place = top[0] is bottom[0]
        x_copy = x.copy() if in_place and self.power != 1 else None
        t = self._base(x)  # a new array, so writing y is safe in place
        if self.power == 1:
            y[...] = t
        else:
            with np.errstate(all="ignore"):
                np.power(t, self.power, out=y)
        if x_copy is not None:
            self.saved = (x_copy, y.copy())

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dx = bottom[0].diff
        if self.diff_scale == 0:
            dx[...] = 0
            return
        if self.power == 1:
            np.multiply(top[0].diff, self.diff_scale, out=dx)
            return
        x, y = self.saved if top[0] is bottom[0] else (bottom[0].data, top[0].data)
        with np.errstate(all="ignore"):
            g = self._gradient(x, y)
            np.multiply(top[0].diff, g, out=dx)

    def _gradient(self, x, y):
        """dy/dx for power not in {0, 1} and diff_scale non-zero."""
        if self.power == 2:
            g = (self.diff_scale * self.scale) * x
            if self.shift != 0:
                g += self.diff_scale * self.shift
            return g
        if self.shift == 0:
            g = y / x
            g *= self.power
            return g
        g = y / self._base(x)
        if self.diff_scale != 1:
            g *= self.diff_scale
        return g
