"""BatchReindex: gather batch items by index (Caffe's BatchReindexLayer).

bottom[1] is a 1-axis blob of K indices into bottom[0]'s first axis (floats, truncated):

    forward:   top[k] = bottom0[idx_k]                (top shape: (K,) + bottom0.shape[1:])
    backward:  d bottom0 = 0,  d bottom0[idx_k] += d top[k]   (repeated indices accumulate)

The indices receive no gradient.

GPU mode checks the indices on the host (a read of the small index blob, as Caffe reads them
on the CPU too) and copies on the device: forward gathers rows; backward gathers too, one
thread per bottom element adding the top rows that point at its row in order (the indices
sorted on the device, ``pycaffe_cli/cuda/copy.py``), so repeated indices need no atomics.
"""
import numpy as np

from pycaffe_cli.cuda import copy
from pycaffe_cli.layers.base import Layer, register


@register("BatchReindex")
class BatchReindexLayer(Layer):
    """Bottoms: the data, then the indices; one top."""

    exact_num_bottom = 2
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        self._row_order = copy.RowOrder()  # the device path's index sort (backward)

    def reshape(self, bottom, top):
        if bottom[1].num_axes != 1:
            raise self.error(f"the index bottom must have exactly 1 axis, got "
                             f"{bottom[1].shape_string()}")
        if bottom[0].num_axes == 0:
            raise self.error("the data bottom must have at least 1 axis")
        top[0].reshape((bottom[1].shape[0],) + bottom[0].shape[1:])

    def _indices(self, bottom):
        values, batch = bottom[1].cpu_data.ravel(), bottom[0].shape[0]
        if (values < 0).any():
            raise self.error("Index specified for reindex layer was negative.")
        if (values >= batch).any():
            raise self.error(f"Index specified for reindex layer was greater than batch size "
                             f"({float(values.max()):g} for a batch of {batch}).")
        return values.astype(np.int64)

    def forward_cpu(self, bottom, top):
        index = self._indices(bottom)
        np.take(bottom[0].data, index, axis=0, out=top[0].data)

    def backward_cpu(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error("Cannot backprop to index.")
        if not propagate_down[0]:
            return
        diff = bottom[0].diff
        diff[...] = 0
        np.add.at(diff, self._indices(bottom), top[0].diff)

    def allow_force_backward(self, bottom_index):
        return bottom_index == 0

    # --- GPU ---------------------------------------------------------------------------
    def forward_gpu(self, bottom, top):
        self._indices(bottom)  # the range check
        copy.gather_rows(bottom[1].gpu_data, bottom[1].count(),
                         bottom[0].shape[0], bottom[0].count(1), bottom[0].gpu_data,
                         top[0].mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error("Cannot backprop to index.")
        if not propagate_down[0]:
            return
        self._row_order.gather_add_rows(bottom[1].gpu_data, bottom[1].count(),
                                        bottom[0].shape[0], bottom[0].count(1),
                                        top[0].gpu_diff, bottom[0].mutable_gpu_diff,
                                        accumulate=False)
