"""Reshape: give the bottom a new shape without copying (Caffe's ReshapeLayer).

reshape_param.shape replaces the bottom axes [axis, axis + num_axes) (all axes by default):

* a dimension of 0 copies the bottom's dimension at the same position (axis + i);
* at most one dimension of -1 is inferred so that the counts match;
* any other dimension is taken as given.

A negative ``axis`` counts from the end, with -1 meaning "after the last axis"
(``start = num_axes + axis + 1``). The top shares the bottom's data and diff,
so forward and backward copy nothing, in GPU mode as in CPU mode.
"""
from pycaffe_cli.layers.base import Layer, register


@register("Reshape")
class ReshapeLayer(Layer):
    """reshape_param: shape, axis (default 0), num_axes (default -1: all)."""

    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        if top[0] is bottom[0]:
            raise self.error("Reshape layer does not allow in-place computation")
        dims = list(self.param.reshape_param.shape.dim)
        self._copy_axes = [i for i, d in enumerate(dims) if d == 0]
        inferred = [i for i, d in enumerate(dims) if d == -1]
        if len(inferred) > 1:
            raise self.error(f"new shape {dims} contains multiple -1 dims; at most a single "
                             f"(1) value of -1 may be specified")
        bad = [d for d in dims if d < -1]
        if bad:
            raise self.error(f"new shape {dims} has a negative dimension {bad[0]} "
                             f"(only 0 = copy and -1 = infer are special)")
        self._inferred_axis = inferred[0] if inferred else None
        self._constant_count = 1
        for d in dims:
            if d > 0:
                self._constant_count *= d

    def _replaced_range(self, source):
        """The bottom axes [start, end) that the new shape replaces."""
        param = self.param.reshape_param
        n = source.num_axes
        start = param.axis if param.axis >= 0 else n + param.axis + 1
        if not 0 <= start <= n:
            raise self.error(f"reshape_param axis {param.axis} out of range for a {n}-D "
                             f"bottom ({source.shape_string()})")
        if param.num_axes < -1:
            raise self.error(f"reshape_param num_axes must be >= 0, or -1 for all "
                             f"(got {param.num_axes})")
        end = n if param.num_axes == -1 else start + param.num_axes
        if end > n:
            raise self.error(f"reshape_param end axis = axis + num_axes = {end} is out of "
                             f"range for a {n}-D bottom ({source.shape_string()})")
        return start, end

    def _top_shape(self, source):
        start, end = self._replaced_range(source)
        dims = list(self.param.reshape_param.shape.dim)
        shape = list(source.shape[:start]) + dims + list(source.shape[end:])
        for i in self._copy_axes:
            if start + i >= source.num_axes:
                raise self.error(f"new shape {dims} contains a 0 at position {i}, but there "
                                 f"is no bottom axis {start + i} to copy "
                                 f"(bottom {source.shape_string()})")
            shape[start + i] = source.shape[start + i]
        if self._inferred_axis is not None:
            explicit = self._constant_count * source.count(0, start) * source.count(end)
            for i in self._copy_axes:
                explicit *= shape[start + i]
            if explicit == 0 or source.count() % explicit != 0:
                raise self.error(f"bottom count ({source.count()}) must be divisible by the "
                                 f"product of the specified dimensions ({explicit})")
            shape[start + self._inferred_axis] = source.count() // explicit
        return tuple(shape)

    def reshape(self, bottom, top):
        shape = self._top_shape(bottom[0])
        count = 1
        for d in shape:
            count *= d
        if count != bottom[0].count():
            raise self.error(f"output count must match input count: the new shape "
                             f"{' '.join(map(str, shape))} ({count}) does not fit the bottom "
                             f"{bottom[0].shape_string()}")
        top[0].reshape(shape)
        top[0].share_data(bottom[0])
        top[0].share_diff(bottom[0])

    def forward_cpu(self, bottom, top):
        """Nothing to do: the top aliases the bottom's data."""

    def backward_cpu(self, top, propagate_down, bottom):
        """Nothing to do: the bottom aliases the top's diff."""

    def forward_gpu(self, bottom, top):
        """Nothing to do on the device either: the top aliases the bottom's data."""

    def backward_gpu(self, top, propagate_down, bottom):
        """Nothing to do on the device either: the bottom aliases the top's diff."""
