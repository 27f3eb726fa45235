"""PReLU: ReLU with a learned negative slope per channel (Caffe's PReLULayer; He et al. 2015).

For a bottom of shape (N, C, ...) with slopes a (shape (C,), or a single slope of shape ()
when ``channel_shared``, as Caffe stores it):

    forward:   y = max(x, 0) + a_c * min(x, 0)
    backward:  da_c += sum over n, spatial of dy * x * [x <= 0]
               dx    = dy * ([x > 0] + a_c * [x <= 0])

Backward needs the bottom data, so in place the layer keeps a copy of the input (as Caffe's
``bottom_memory_``) and computes the slope gradient before overwriting the shared diff.
"""
import numpy as np

from pycaffe_cli.blob import Blob
from pycaffe_cli.fillers import fill
from pycaffe_cli.layers.base import NeuronLayer, register
from pycaffe_cli.proto import caffe_pb2

DEFAULT_SLOPE = 0.25


@register("PReLU")
class PReLULayer(NeuronLayer):
    """y = max(x, 0) + a_c min(x, 0) with learnable a."""

    saved_input = None

    def layer_setup(self, bottom, top):
        p = self.param.prelu_param
        self._check_axes(bottom[0])
        self.channel_shared = p.channel_shared
        channels = bottom[0].shape[1]
        if not self.blobs:
            self.blobs = [Blob(() if self.channel_shared else (channels,))]
            self._fill_slopes(p)
        wanted = 1 if self.channel_shared else channels
        if self.blobs[0].count() != wanted:
            raise self.error(f"Negative slope size is inconsistent with prototxt config: the "
                             f"slope blob has {self.blobs[0].count()} value(s), "
                             + ("channel_shared needs 1" if self.channel_shared else
                                f"the bottom {bottom[0].shape_string()} has {channels} "
                                "channels"))
        self.param_propagate_down = [True] * len(self.blobs)

    def _fill_slopes(self, p):
        if p.HasField("filler"):
            filler = p.filler
        else:
            filler = caffe_pb2.FillerParameter(type="constant", value=DEFAULT_SLOPE)
        # fill a 1-axis twin: the fillers' fan computations need at least one axis
        twin = Blob((self.blobs[0].count(),))
        fill(twin, filler, self.name)
        self.blobs[0].flat_data[:] = twin.flat_data

    def _check_axes(self, blob):
        if blob.num_axes < 2:
            raise self.error(f"Number of axes of bottom blob must be >=2 (got "
                             f"{blob.shape_string()})")

    def reshape(self, bottom, top):
        self._check_axes(bottom[0])
        if not self.channel_shared and bottom[0].shape[1] != self.blobs[0].count():
            raise self.error(f"the bottom {bottom[0].shape_string()} has {bottom[0].shape[1]} "
                             f"channels, the slopes {self.blobs[0].count()}")
        super().reshape(bottom, top)

    def _slopes(self, ndim):
        """The slopes shaped to broadcast over (N, C, ...)."""
        a = self.blobs[0].flat_data
        if self.channel_shared:
            return a[0]
        return a.reshape((1, -1) + (1,) * (ndim - 2))

    def forward_cpu(self, bottom, top):
        x = bottom[0].data
        self.saved_input = x.copy() if top[0] is bottom[0] else None
        zero = np.float32(0)
        negative = self._slopes(x.ndim) * np.minimum(x, zero)
        np.add(np.maximum(x, zero), negative, out=top[0].data)

    def backward_cpu(self, top, propagate_down, bottom):
        x = self.saved_input if top[0] is bottom[0] else bottom[0].data
        dy = top[0].diff
        negative = x <= 0
        # the slope gradient first: in place, writing dx overwrites dy
        if self.param_propagate_down[0]:
            self._accumulate_slope_diff(dy * x * negative)
        if propagate_down[0]:
            slope = np.where(negative, self._slopes(x.ndim), np.float32(1))
            np.multiply(dy, slope, out=bottom[0].diff)

    def _accumulate_slope_diff(self, terms):
        if self.channel_shared:
            total = terms.sum(dtype=np.float64)
        else:
            axes = (0,) + tuple(range(2, terms.ndim))
            total = terms.sum(axis=axes, dtype=np.float64)
        diff = self.blobs[0].flat_diff
        diff += np.asarray(total, dtype=np.float32).reshape(-1)
