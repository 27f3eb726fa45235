"""Flatten: merge the axes [axis, end_axis] into one (Caffe's FlattenLayer).

    top.shape = bottom.shape[:axis] + (prod(bottom.shape[axis:end_axis + 1]),)
                + bottom.shape[end_axis + 1:]

The top shares the bottom's data and diff, so forward and backward copy nothing,
in GPU mode as in CPU mode.
"""
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.views import layer_axis


@register("Flatten", v1="FLATTEN")
class FlattenLayer(Layer):
    """flatten_param: axis (default 1), end_axis (default -1, the last axis)."""

    exact_num_bottom = 1
    exact_num_top = 1

    def reshape(self, bottom, top):
        if top[0] is bottom[0]:
            raise self.error("Flatten layer does not allow in-place computation")
        param = self.param.flatten_param
        source = bottom[0]
        start = layer_axis(self, source, param.axis)
        end = layer_axis(self, source, param.end_axis)
        if end < start:
            raise self.error(f"flatten_param end_axis ({param.end_axis}) comes before axis "
                             f"({param.axis}) for bottom shape {source.shape_string()}")
        shape = source.shape[:start] + (source.count(start, end + 1),) + source.shape[end + 1:]
        top[0].reshape(shape)
        top[0].share_data(source)
        top[0].share_diff(source)

    def forward_cpu(self, bottom, top):
        """Nothing to do: the top aliases the bottom's data."""

    def backward_cpu(self, top, propagate_down, bottom):
        """Nothing to do: the bottom aliases the top's diff."""

    def forward_gpu(self, bottom, top):
        """Nothing to do on the device either: the top aliases the bottom's data."""

    def backward_gpu(self, top, propagate_down, bottom):
        """Nothing to do on the device either: the bottom aliases the top's diff."""
