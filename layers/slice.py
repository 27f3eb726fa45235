"""Slice: cut one bottom into several tops along one axis (Caffe's SliceLayer).

With the bottom viewed as (outer, n, inner) around the slice axis, and the slice points
p_1 < ... < p_{K-1} (p_0 = 0, p_K = n):

    top_k = bottom[:, p_k : p_{k+1}, :]                    (forward)
    bottom.diff[:, p_k : p_{k+1}, :] = top_k.diff           (backward)

Without slice points the axis is split into K equal parts. A single top shares the bottom's
data and diff.

GPU mode: one strided block copy per top, each way (``pycaffe_cli/cuda/copy.py``).
"""
from pycaffe_cli.cuda import copy
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.concat import legacy_axis, outer_axis_inner
from pycaffe_cli.layers.views import three_axis_view


@register("Slice", v1="SLICE")
class SliceLayer(Layer):
    """slice_param: axis (default 1) or legacy slice_dim, and slice_point (K-1 of them)."""

    exact_num_bottom = 1
    min_num_top = 1

    def layer_setup(self, bottom, top):
        param = self.param.slice_param
        if param.HasField("axis") and param.HasField("slice_dim"):
            raise self.error("either axis or slice_dim should be specified in slice_param; "
                             "not both")
        self._points = list(param.slice_point)

    def _sizes(self, n, num_top):
        """The size of each top along the slice axis."""
        if not self._points:
            if n % num_top:
                raise self.error(f"number of top blobs ({num_top}) should evenly divide the "
                                 f"input slice axis ({n})")
            return [n // num_top] * num_top
        if len(self._points) != num_top - 1:
            raise self.error(f"{len(self._points)} slice_point(s) given for {num_top} tops; "
                             f"need exactly {num_top - 1}")
        if num_top > n:
            raise self.error(f"cannot slice an axis of size {n} into {num_top} tops")
        edges = [0] + self._points + [n]
        if any(b <= a for a, b in zip(edges, edges[1:])):
            raise self.error(f"slice_point {self._points} must be strictly increasing, above "
                             f"0 and below the slice axis size {n}")
        return [b - a for a, b in zip(edges, edges[1:])]

    def reshape(self, bottom, top):
        source = bottom[0]
        axis = legacy_axis(self, source, self.param.slice_param, "slice_dim", "slice")
        self._axis = axis
        shape = list(source.shape)
        for blob, size in zip(top, self._sizes(source.shape[axis], len(top))):
            shape[axis] = size
            blob.reshape(shape)
        if len(top) == 1:
            top[0].share_data(source)
            top[0].share_diff(source)

    def forward_cpu(self, bottom, top):
        if len(top) == 1:
            return
        source = three_axis_view(bottom[0].data, self._axis)
        offset = 0
        for blob in top:
            n = blob.shape[self._axis]
            three_axis_view(blob.data, self._axis)[...] = source[:, offset:offset + n, :]
            offset += n

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0] or len(top) == 1:
            return
        grad = three_axis_view(bottom[0].diff, self._axis)
        offset = 0
        for blob in top:
            n = blob.shape[self._axis]
            grad[:, offset:offset + n, :] = three_axis_view(blob.diff, self._axis)
            offset += n

    # --- GPU ---------------------------------------------------------------------------
    def _blocks(self, top):
        """(top index, its size on the axis, its offset in the bottom) per top."""
        offset = 0
        for i, blob in enumerate(top):
            n = blob.shape[self._axis]
            yield i, n, offset
            offset += n

    def forward_gpu(self, bottom, top):
        if len(top) == 1:
            return
        outer, total, inner = outer_axis_inner(bottom[0], self._axis)
        source = bottom[0].gpu_data
        for i, n, offset in self._blocks(top):
            copy.copy_block(source, top[i].mutable_gpu_data, outer, n, inner, total, offset, n, 0)

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0] or len(top) == 1:
            return
        outer, total, inner = outer_axis_inner(bottom[0], self._axis)
        grad = bottom[0].mutable_gpu_diff
        for i, n, offset in self._blocks(top):
            copy.copy_block(top[i].gpu_diff, grad, outer, n, inner, n, 0, total,
                            offset)
