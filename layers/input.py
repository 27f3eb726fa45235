"""Input: the net's externally fed blobs (Caffe's InputLayer).

Tops take their shapes from ``input_param.shape`` (one shape for every top, or one per top);
the caller writes the data. Forward does nothing and Reshape keeps whatever shape the tops
have, so a caller may reshape an input blob and then reshape the net. GPU mode has nothing to
do either.
"""
from pycaffe_cli.layers.base import Layer, register


@register("Input")
class InputLayer(Layer):
    """No bottoms, one or more tops shaped by ``input_param.shape``."""

    exact_num_bottom = 0
    min_num_top = 1

    def layer_setup(self, bottom, top):
        shapes = self.param.input_param.shape
        if len(shapes) not in (0, 1, len(top)):
            raise self.error(f"input_param must give 'shape' once, once per top blob, or not "
                             f"at all: {len(top)} tops vs. {len(shapes)} shapes")
        for i, blob in enumerate(top):
            if shapes:
                blob.reshape(shapes[0 if len(shapes) == 1 else i].dim)

    def reshape(self, bottom, top):
        """The tops keep their shapes: the caller owns them."""

    def forward_cpu(self, bottom, top):
        """The caller fills the tops; nothing to compute."""

    def forward_gpu(self, bottom, top):
        """The caller fills the tops (on the host or the device); nothing to compute."""

    def backward_gpu(self, top, propagate_down, bottom):
        """Inputs take no gradient."""
