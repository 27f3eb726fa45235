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

GPU: a fill for the constant cases, else one kernel per direction with the backward's case
(``GRAD_*``) chosen on the host, the CPU's float32 arithmetic in each; in place, device copies
of the input and the output.
"""
import numpy as np
from numba import cuda

from pycaffe_cli.cuda import memory
from pycaffe_cli.cuda.elementwise import DeviceCopy
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import NeuronLayer, register

# the backward's cases, as listed in the module doc (diff_scale 0 is a fill instead)
GRAD_LINEAR = 0   # power 1
GRAD_SQUARE = 1   # power 2
GRAD_NO_SHIFT = 2
GRAD_GENERAL = 3


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
        self._gpu_input = DeviceCopy()
        self._gpu_output = DeviceCopy()

    def _base(self, x):
        """shift + scale * x in float32, with Caffe's skipped no-op steps (a new array)."""
        t = x * self.scale if self.scale != 1 else x.copy()
        if self.shift != 0:
            t += self.shift
        return t

    def _constant(self):
        """The output when diff_scale is 0."""
        with np.errstate(all="ignore"):
            return np.float32(1) if self.power == 0 else self.shift ** self.power

    def forward_cpu(self, bottom, top):
        y = top[0].data
        self.saved = None
        if self.diff_scale == 0:
            y[...] = self._constant()
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

    def forward_gpu(self, bottom, top):
        y = top[0].mutable_gpu_data
        if self.diff_scale == 0:
            memory.fill(y, self._constant())
            return
        keep = top[0] is bottom[0] and self.power != 1
        x = self._gpu_input.keep_if(bottom[0].gpu_data, keep)
        launch(_power_forward_kernel, x.size, x, y, self.power, self.scale, self.shift)
        self._gpu_output.keep_if(y, keep)

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dx = bottom[0].mutable_gpu_diff
        if self.diff_scale == 0:
            memory.fill(dx, 0)
            return
        if self.power == 1:
            x = y = top[0].gpu_diff  # not read
        else:
            in_place = top[0] is bottom[0]
            x = self._gpu_input.kept_or(bottom[0], in_place)
            y = self._gpu_output.kept_or(top[0], in_place)
        launch(_power_backward_kernel, dx.size, x, y, top[0].gpu_diff, dx,
               self._gradient_case(), self.power, self.scale, self.shift, self.diff_scale)

    def _gradient_case(self):
        if self.power == 1:
            return GRAD_LINEAR
        if self.power == 2:
            return GRAD_SQUARE
        return GRAD_NO_SHIFT if self.shift == 0 else GRAD_GENERAL


# --- GPU ------------------------------------------------------------------------------------
@cuda.jit(cache=True)
def _power_forward_kernel(n, x, y, power, scale, shift):
    """y = (shift + scale * x)^power, for diff_scale non-zero (``x`` may be ``y``)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        base = x[index] * scale + shift
        # ``**`` compiles to powf as math.pow does, but in the CUDA simulator gives NaN for
        # a negative base (as the device does) where math.pow raises
        y[index] = base if power == 1 else base ** power


@cuda.jit(cache=True)
def _power_backward_kernel(n, x, y, dy, dx, case, power, scale, shift, diff_scale):
    """dx = dy * dy/dx in the CPU's ``case`` (see ``GRAD_*``)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        if case == GRAD_LINEAR:
            g = diff_scale
        elif case == GRAD_SQUARE:
            g = (diff_scale * scale) * x[index] + diff_scale * shift
        elif case == GRAD_NO_SHIFT:
            g = y[index] / x[index] * power
        else:
            g = y[index] / (x[index] * scale + shift) * diff_scale
        dx[index] = dy[index] * g
