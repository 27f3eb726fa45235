"""Filter: keep the batch items whose selector is nonzero (Caffe's FilterLayer).

The last bottom is the selector (shape (N,) or (N, 1, ...)); every other bottom i (first axis
N) gives top i holding the kept items in order:

    forward:   top_i = bottom_i[k]             k = indices where selector != 0
    backward:  d bottom_i = 0,  d bottom_i[k] = d top_i

As in Caffe, the tops have the full batch size right after setup (so the net's memory
estimate covers the worst case) and the kept count from the first forward on. The selector
receives no gradient.

GPU mode reads the selector on the host (in reshape, as Caffe does), sends the kept indices
to the device, and gathers the rows there; backward gathers each bottom row's diff (zero
where not kept) with ``pycaffe_cli/cuda/copy.py``'s index gather.
"""
import numpy as np

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda import copy
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.inference_hooks import InferenceHooks


class FilterInferenceHooks(InferenceHooks):
    reshape_reads_values = True  # the selector's values set the tops' first axis


@register("Filter")
class FilterLayer(Layer):
    """Bottoms: the blobs to filter, then the selector; one top per filtered blob."""

    min_num_bottom = 2
    min_num_top = 1
    inference_hooks = FilterInferenceHooks

    def layer_setup(self, bottom, top):
        if len(top) != len(bottom) - 1:
            raise self.error(f"Filter layer needs one top per filtered bottom: got "
                             f"{len(bottom)} bottoms (the last is the selector) and "
                             f"{len(top)} tops")
        self._first_reshape = True
        self._selector_index = len(bottom) - 1
        self._gpu_kept = Blob()  # the kept indices, for the device path
        self._row_order = copy.RowOrder()

    def reshape(self, bottom, top):
        selector = bottom[-1]
        if selector.num_axes == 0 or any(d != 1 for d in selector.shape[1:]):
            raise self.error(f"Selector blob dimensions must be singletons (1), except the "
                             f"first (the selector is {selector.shape_string()})")
        for i, blob in enumerate(bottom[:-1]):
            if blob.num_axes == 0 or blob.shape[0] != selector.shape[0]:
                raise self.error(f"Each bottom should have the same 0th dimension as the "
                                 f"selector blob: bottom[{i}] is {blob.shape_string()}, the "
                                 f"selector {selector.shape_string()}")
        self.kept = np.flatnonzero(selector.cpu_data.ravel())
        count = len(self.kept)
        if self._first_reshape:
            count, self._first_reshape = selector.shape[0], False
        for blob, out in zip(bottom[:-1], top):
            out.reshape((count,) + blob.shape[1:])

    def forward_cpu(self, bottom, top):
        for blob, out in zip(bottom[:-1], top):
            np.take(blob.data, self.kept, axis=0, out=out.data)

    def backward_cpu(self, top, propagate_down, bottom):
        if propagate_down[-1]:
            raise self.error("Filter layer cannot backpropagate to filter index inputs "
                             "(the selector)")
        for i, out in enumerate(top):
            if propagate_down[i]:
                diff = bottom[i].diff
                diff[...] = 0
                diff[self.kept] = out.diff

    def allow_force_backward(self, bottom_index):
        return bottom_index != self._selector_index

    # --- GPU ---------------------------------------------------------------------------
    def forward_gpu(self, bottom, top):
        count = len(self.kept)
        self._gpu_kept.reshape((count,))
        self._gpu_kept.data[...] = self.kept
        index = self._gpu_kept.gpu_data
        for blob, out in zip(bottom[:-1], top):
            copy.gather_rows(index, count, blob.shape[0], blob.count(1),
                             blob.gpu_data, out.mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        if propagate_down[-1]:
            raise self.error("Filter layer cannot backpropagate to filter index inputs "
                             "(the selector)")
        index = self._gpu_kept.gpu_data
        for i, out in enumerate(top):
            if propagate_down[i]:
                self._row_order.gather_add_rows(index, len(self.kept), bottom[i].shape[0],
                                                bottom[i].count(1), out.gpu_diff,
                                                bottom[i].mutable_gpu_diff, accumulate=False)
