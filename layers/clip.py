"""Clip: clamp every value to [min, max] (Caffe's ClipLayer).

    forward:   y = max(min, min(x, max))
    backward:  dx = dy if min <= x <= max else 0

Caffe parses ``clip_param { min max }`` with both fields required and does not check
min <= max (then every output is ``min``). Backward needs the bottom data; Caffe reads the
(overwritten) top when run in place, while this layer keeps a copy of the input then.

GPU: one kernel per direction (NaN propagates as through numpy's minimum and maximum); in
place, a device copy of the input.
"""
import numpy as np
from numba import cuda

from pycaffe_cli.cuda.elementwise import DeviceCopy
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import NeuronLayer, register


@register("Clip")
class ClipLayer(NeuronLayer):
    """y = clamp(x, min, max)."""

    saved_input = None

    def layer_setup(self, bottom, top):
        p = self.param.clip_param
        missing = [f for f in ("min", "max") if not p.HasField(f)]
        if missing:
            raise self.error(f"Clip layer needs clip_param {{ min: ... max: ... }} (missing "
                             f"{' and '.join(missing)})")
        self.min = np.float32(p.min)
        self.max = np.float32(p.max)
        self._gpu_input = DeviceCopy()

    def forward_cpu(self, bottom, top):
        x = bottom[0].data
        self.saved_input = x.copy() if top[0] is bottom[0] else None
        # not np.clip: with min > max Caffe's max(min, min(x, max)) gives min
        np.maximum(self.min, np.minimum(x, self.max), out=top[0].data)

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = self.saved_input if top[0] is bottom[0] else bottom[0].data
        inside = (x >= self.min) & (x <= self.max)
        np.multiply(top[0].diff, inside, out=bottom[0].diff)

    def forward_gpu(self, bottom, top):
        x = self._gpu_input.keep_if(bottom[0].gpu_data, top[0] is bottom[0])
        launch(_clip_forward_kernel, x.size, x, top[0].mutable_gpu_data, self.min, self.max)

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = self._gpu_input.kept_or(bottom[0], top[0] is bottom[0])
        launch(_clip_backward_kernel, x.size, x, top[0].gpu_diff,
               bottom[0].mutable_gpu_diff, self.min, self.max)


# --- GPU ------------------------------------------------------------------------------------
@cuda.jit(cache=True)
def _clip_forward_kernel(n, x, y, lo, hi):
    """y = max(lo, min(x, hi))."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        value = x[index]
        value = hi if value > hi else value
        y[index] = lo if value < lo else value


@cuda.jit(cache=True)
def _clip_backward_kernel(n, x, dy, dx, lo, hi):
    """dx = dy * [lo <= x <= hi]."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        value = x[index]
        inside = np.float32(1) if value >= lo and value <= hi else np.float32(0)
        dx[index] = dy[index] * inside
