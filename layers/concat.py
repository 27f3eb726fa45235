"""Concat: join bottoms along one axis (Caffe's ConcatLayer).

With the bottoms viewed as (outer, n_i, inner) around the concat axis,

    top[:, offset_i : offset_i + n_i, :] = bottom_i        (forward)
    bottom_i.diff = top.diff[:, offset_i : offset_i + n_i, :]   (backward)

All other dimensions must agree. With a single bottom the top shares its data and diff.

GPU mode: one strided block copy per bottom, each way (``pycaffe_cli/cuda/copy.py``).
"""
from pycaffe_cli.cuda import copy
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.inference_hooks import InferenceHooks
from pycaffe_cli.layers.views import layer_axis, three_axis_view


def legacy_axis(layer, source, param, legacy_field, what):
    """The canonical axis from ``axis`` or the legacy uint32 field (Concat/Slice share this)."""
    if param.HasField(legacy_field):
        axis = getattr(param, legacy_field)
        if axis >= source.num_axes:
            raise layer.error(f"{what}_param {legacy_field} ({axis}) out of range for bottom "
                              f"shape {source.shape_string()}")
        return axis
    return layer_axis(layer, source, param.axis)


class ConcatInferenceHooks(InferenceHooks):
    """On the CPU, the forward-only pass has nothing to do where the inference plan made
    every bottom a view of its run of the top (pycaffe_cli/inference/memory.py)."""

    def forward_pass(self):
        layer = self.layer
        if layer._use_gpu("forward"):
            return layer.forward_pass()
        return layer._forward_unless_viewed


@register("Concat", v1="CONCAT")
class ConcatLayer(Layer):
    """concat_param: axis (default 1) or the legacy concat_dim, not both."""

    min_num_bottom = 1
    exact_num_top = 1
    inference_hooks = ConcatInferenceHooks

    def layer_setup(self, bottom, top):
        param = self.param.concat_param
        if param.HasField("axis") and param.HasField("concat_dim"):
            raise self.error("either axis or concat_dim should be specified in concat_param; "
                             "not both")

    def reshape(self, bottom, top):
        first = bottom[0]
        axis = legacy_axis(self, first, self.param.concat_param, "concat_dim", "concat")
        shape = list(first.shape)
        for i, blob in enumerate(bottom[1:], start=1):
            same_rest = (blob.num_axes == first.num_axes and all(
                a == b for j, (a, b) in enumerate(zip(blob.shape, first.shape)) if j != axis))
            if not same_rest:
                raise self.error(f"all inputs must have the same shape, except at concat axis "
                                 f"{axis}: bottom[0] is {first.shape_string()}, bottom[{i}] is "
                                 f"{blob.shape_string()}")
            shape[axis] += blob.shape[axis]
        self._axis = axis
        top[0].reshape(shape)
        if len(bottom) == 1:
            top[0].share_data(first)
            top[0].share_diff(first)

    def _forward_unless_viewed(self, bottom, top):
        """``forward_cpu`` unless every bottom is already a view of its run of the top."""
        offset, memory = 0, top[0].data_memory
        for blob in bottom:
            view = blob.data_memory
            if getattr(view, "parent", None) is not memory or view.offset != offset:
                self.forward_cpu(bottom, top)
                return
            offset += blob.count()

    def forward_cpu(self, bottom, top):
        if len(bottom) == 1:
            return
        out = three_axis_view(top[0].data, self._axis)
        offset = 0
        for blob in bottom:
            n = blob.shape[self._axis]
            out[:, offset:offset + n, :] = three_axis_view(blob.data, self._axis)
            offset += n

    def backward_cpu(self, top, propagate_down, bottom):
        if len(bottom) == 1:
            return
        grad = three_axis_view(top[0].diff, self._axis)
        offset = 0
        for blob, down in zip(bottom, propagate_down):
            n = blob.shape[self._axis]
            if down:
                three_axis_view(blob.diff, self._axis)[...] = grad[:, offset:offset + n, :]
            offset += n

    # --- GPU ---------------------------------------------------------------------------
    def _blocks(self, bottom):
        """(bottom index, its size on the axis, its offset in the top) per bottom."""
        offset = 0
        for i, blob in enumerate(bottom):
            n = blob.shape[self._axis]
            yield i, n, offset
            offset += n

    def forward_gpu(self, bottom, top):
        if len(bottom) == 1:
            return
        outer, total, inner = outer_axis_inner(top[0], self._axis)
        out = top[0].mutable_gpu_data
        for i, n, offset in self._blocks(bottom):
            copy.copy_block(bottom[i].gpu_data, out, outer, n, inner, n, 0,
                            total, offset)

    def backward_gpu(self, top, propagate_down, bottom):
        if len(bottom) == 1:
            return
        outer, total, inner = outer_axis_inner(top[0], self._axis)
        grad = top[0].gpu_diff
        for i, n, offset in self._blocks(bottom):
            if propagate_down[i]:
                copy.copy_block(grad, bottom[i].mutable_gpu_diff, outer, n, inner, total, offset, n,
                                0)


def outer_axis_inner(blob, axis):
    """(count before axis, shape[axis], count after axis) of ``blob``."""
    return blob.count(0, axis), blob.shape[axis], blob.count(axis + 1)
