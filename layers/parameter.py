"""Parameter: expose one learnable blob as the layer's top (Caffe's ParameterLayer).

The blob has ``parameter_param.shape`` and starts at zero (no filler, as in Caffe). The top
shares the blob's data and diff, so whatever the consumers write into the top's diff is the
blob's gradient; forward and backward copy nothing (in GPU mode too).
"""
from pycaffe_cli.blob import Blob
from pycaffe_cli.layers.base import Layer, register


@register("Parameter")
class ParameterLayer(Layer):
    """parameter_param: shape (a BlobShape)."""

    exact_num_bottom = 0
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        shape = tuple(self.param.parameter_param.shape.dim)
        if not self.blobs:
            self.blobs = [Blob(shape)]
        self.param_propagate_down = [True] * len(self.blobs)
        top[0].reshape(shape)
        if len(self.blobs) != 1 or self.blobs[0].count() != top[0].count():
            raise self.error(f"the layer's given blobs {[b.shape for b in self.blobs]} do "
                             f"not match parameter_param.shape {shape}")
        self._share(top)

    def _share(self, top):
        top[0].share_data(self.blobs[0])
        top[0].share_diff(self.blobs[0])

    def reshape(self, bottom, top):
        """The top keeps the shape set up from parameter_param."""

    def forward_cpu(self, bottom, top):
        self._share(top)

    def backward_cpu(self, top, propagate_down, bottom):
        """Nothing to do: the top's diff is the blob's diff."""

    def forward_gpu(self, bottom, top):
        self._share(top)  # touches no data, so the blob stays where it is

    def backward_gpu(self, top, propagate_down, bottom):
        """Nothing to do: the top's diff is the blob's diff."""
