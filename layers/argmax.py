"""ArgMax: the indices (and optionally values) of the top_k largest entries (Caffe's ArgMaxLayer).

Without ``axis`` each instance's values (all axes after the first) are ranked and the top has
shape (N, 1, top_k), or (N, 2, top_k) with ``out_max_val`` (row 0 the indices, row 1 the
values); a bottom with fewer than 3 axes still gives a 3-axis top. With ``axis`` the ranking is
along that axis and the top is the bottom's shape with top_k on that axis, holding the
indices, or the values with ``out_max_val``.

Ranking is Caffe's partial_sort of (value, index) pairs with greater<>: larger values first
and, between equal values, the larger index first. Indices are stored as floats. There is no
backward pass.

GPU mode: one thread per ranked row (instance, or position along the other axes) selects the
top_k pairs in that order, one pass over the row per k.
"""
import numpy as np
from numba import cuda

from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.views import layer_axis

# What the GPU kernel writes: with an axis, indices or values; without, indices (and values).
AXIS_INDICES, AXIS_VALUES, FLAT_INDICES, FLAT_BOTH = range(4)


def top_k_indices(values, k):
    """Indices of the k largest entries along the last axis of ``values``, best first, ties to
    the larger index."""
    dim = values.shape[-1]
    if k == 1:
        # argmax returns the first maximum; on the reversed row that is the last one.
        return (dim - 1 - np.argmax(values[..., ::-1], axis=-1))[..., None]
    # A stable descending sort of the reversed row puts equal values in falling index order.
    order = np.argsort(-values[..., ::-1], axis=-1, kind="stable")
    return dim - 1 - order[..., :k]


@register("ArgMax", v1="ARGMAX")
class ArgMaxLayer(Layer):
    """argmax_param: out_max_val (false), top_k (1), axis (unset: per flattened instance)."""

    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.param.argmax_param
        self.out_max_val = p.out_max_val
        self.top_k = p.top_k
        self.has_axis = p.HasField("axis")
        if self.top_k < 1:
            raise self.error("top k must not be less than 1.")
        if self.has_axis:
            axis = layer_axis(self, bottom[0], p.axis)
            if self.top_k > bottom[0].shape[axis]:
                raise self.error(f"top_k ({self.top_k}) must be less than or equal to the "
                                 f"dimension of the axis ({bottom[0].shape[axis]} at axis "
                                 f"{axis} of {bottom[0].shape_string()})")
        elif self.top_k > bottom[0].count(1):
            raise self.error(f"top_k ({self.top_k}) must be less than or equal to the "
                             f"dimension of the flattened bottom blob per instance "
                             f"({bottom[0].count(1)} for {bottom[0].shape_string()})")

    def reshape(self, bottom, top):
        source = bottom[0]
        if self.has_axis:
            self.axis = layer_axis(self, source, self.param.argmax_param.axis)
            shape = list(source.shape)
            shape[self.axis] = self.top_k
        else:
            shape = [1] * max(source.num_axes, 3)
            shape[0] = source.shape[0]
            shape[1] = 2 if self.out_max_val else 1
            shape[2] = self.top_k
        top[0].reshape(shape)

    def forward_cpu(self, bottom, top):
        x = bottom[0].data
        if self.has_axis:
            rows = np.moveaxis(x, self.axis, -1)
            index = top_k_indices(rows, self.top_k)
            result = np.take_along_axis(rows, index, axis=-1) if self.out_max_val else index
            top[0].data[...] = np.moveaxis(result, -1, self.axis)
            return
        rows = x.reshape(x.shape[0], -1)
        index = top_k_indices(rows, self.top_k)
        out = top[0].data.reshape(x.shape[0], -1, self.top_k)
        out[:, 0, :] = index
        if self.out_max_val:
            out[:, 1, :] = np.take_along_axis(rows, index, axis=-1)

    def backward_cpu(self, top, propagate_down, bottom):
        if any(propagate_down):
            raise self.error("ArgMax layer has no backward pass (Not Implemented)")

    def forward_gpu(self, bottom, top):
        source = bottom[0]
        if self.has_axis:
            outer, dim = source.count(0, self.axis), source.shape[self.axis]
            inner = source.count(self.axis + 1)
            mode = AXIS_VALUES if self.out_max_val else AXIS_INDICES
        else:
            outer, dim, inner = source.shape[0], source.count(1), 1
            mode = FLAT_BOTH if self.out_max_val else FLAT_INDICES
        launch(_top_k_kernel, outer * inner, source.gpu_data, dim, inner,
               self.top_k, mode, top[0].mutable_gpu_data)

    backward_gpu = backward_cpu  # nothing to compute; only the error for a requested gradient

    def allow_force_backward(self, bottom_index):
        return False


@cuda.jit(cache=True)
def _top_k_kernel(n, x, dim, inner, top_k, mode, y):
    """Row (o, i) of x viewed as (outer, dim, inner): its top_k (value, index) pairs, larger
    value first and then larger index, each found as the best pair ranked below the last."""
    for row in range(cuda.grid(1), n, cuda.gridsize(1)):
        outer = row // inner
        start = outer * dim * inner + row % inner
        last_value = np.float32(0)
        last_j = -1
        for k in range(top_k):
            best_value = np.float32(0)
            best_j = -1
            for j in range(dim):
                value = x[start + j * inner]
                if k > 0 and not (value < last_value or (value == last_value and j < last_j)):
                    continue
                if best_j < 0 or value > best_value or value == best_value:
                    best_value = value
                    best_j = j
            if mode == AXIS_INDICES:
                y[(outer * top_k + k) * inner + row % inner] = best_j
            elif mode == AXIS_VALUES:
                y[(outer * top_k + k) * inner + row % inner] = best_value
            elif mode == FLAT_INDICES:
                y[outer * top_k + k] = best_j
            else:
                y[outer * 2 * top_k + k] = best_j
                y[outer * 2 * top_k + top_k + k] = best_value
            last_value = best_value
            last_j = best_j
