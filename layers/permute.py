"""Permute: reorder a blob's axes (SSD's PermuteLayer), as SSD turns the (N, C, H, W) box
predictions into (N, H, W, C) before flattening them.

    top.shape[i] = bottom.shape[order[i]],    top[t_0, ..., t_k] = bottom[b] with b_order[i] = t_i

``permute_param.order`` lists the new order of the first axes; the axes it leaves out follow
in their own order (``order: 0 order: 2 order: 3 order: 1`` on 4 axes; ``order: 1`` on 3 axes
gives 1, 0, 2). Backward is the inverse permutation of the top diff into the bottom diff.
When the order leaves every axis in place, the top shares the bottom's data and diff, as in
the fork, and nothing is copied.

CPU: a numpy transposed copy. GPU: pycaffe_cli/cuda/copy.py's strided copy, one thread per
top element (forward reads the bottom through permuted strides, backward writes the bottom
diff through them: a bijection, so every element is written once).
"""
import numpy as np

from pycaffe_cli.cuda import copy
from pycaffe_cli.io.foreign import SSD
from pycaffe_cli.layers.base import Layer, register


@register("Permute", fork=SSD)
class PermuteLayer(Layer):
    """permute_param: order (repeated; a permutation of some of 0 .. num_axes - 1)."""

    exact_num_bottom = 1
    exact_num_top = 1

    def _order(self, num_axes):
        given = [int(axis) for axis in self.param.permute_param.order]
        for axis in given:
            if axis >= num_axes:
                raise self.error(f"permute_param order {axis} is out of range for a bottom "
                                 f"of {num_axes} axes (orders must be less than {num_axes})")
        if len(set(given)) != len(given):
            raise self.error(f"permute_param order {given} lists an axis more than once")
        return given + [axis for axis in range(num_axes) if axis not in given]

    def reshape(self, bottom, top):
        source = bottom[0]
        if top[0] is source:
            raise self.error("Permute layer does not allow in-place computation")
        self.order = self._order(source.num_axes)
        self.need_permute = self.order != list(range(source.num_axes))
        top[0].reshape(tuple(source.shape[axis] for axis in self.order))
        if not self.need_permute:
            top[0].share_data(source)
            top[0].share_diff(source)
        self.inverse = [int(axis) for axis in np.argsort(self.order)]

    # --- CPU ---------------------------------------------------------------------------------
    def forward_cpu(self, bottom, top):
        if self.need_permute:
            np.copyto(top[0].data, np.transpose(bottom[0].data, self.order))

    def backward_cpu(self, top, propagate_down, bottom):
        if self.need_permute and propagate_down[0]:
            np.copyto(bottom[0].diff, np.transpose(top[0].diff, self.inverse))

    # --- GPU ---------------------------------------------------------------------------------
    def _strides(self, bottom):
        """(top shape, the bottom's strides in the top's axis order, the top's strides)."""
        bottom_strides = copy.contiguous_strides(bottom.shape)
        shape = tuple(bottom.shape[axis] for axis in self.order)
        return shape, tuple(bottom_strides[axis] for axis in self.order), \
            copy.contiguous_strides(shape)

    def forward_gpu(self, bottom, top):
        if self.need_permute:
            shape, gathered, strides = self._strides(bottom[0])
            copy.strided_copy(shape, bottom[0].gpu_data, 0, gathered, top[0].mutable_gpu_data,
                              0, strides)

    def backward_gpu(self, top, propagate_down, bottom):
        if self.need_permute and propagate_down[0]:
            # a bijection: every bottom element is written exactly once
            shape, gathered, strides = self._strides(bottom[0])
            copy.strided_copy(shape, top[0].gpu_diff, 0, strides, bottom[0].mutable_gpu_diff,
                              0, gathered)
