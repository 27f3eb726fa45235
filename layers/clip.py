"""Clip: clamp every value to [min, max] (Caffe's ClipLayer).

    forward:   y = max(min, min(x, max))
    backward:  dx = dy if min <= x <= max else 0

Caffe parses ``clip_param { min max }`` with both fields required and does not check
min <= max (then every output is ``min``). Backward needs the bottom data; Caffe reads the
(overwritten) top when run in place, while this layer keeps a copy of the input then.
"""
import numpy as np

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
