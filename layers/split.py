"""Split: hand one bottom blob to several consumers (Caffe's SplitLayer).

The net inserts Split layers wherever one top feeds several bottoms. Every top shares the
bottom's data (no copy); the gradients of the consumers are summed into the bottom:

    bottom.diff = top[0].diff + top[1].diff + ... + top[K-1].diff

GPU mode: forward shares as on the CPU; backward adds the top diffs on the device, in the
same order.
"""
import numpy as np

from pycaffe_cli.cuda import math as gpu_math
from pycaffe_cli.cuda import memory
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.kernels.cpu import eltwise


@register("Split", v1="SPLIT")
class SplitLayer(Layer):
    """One bottom, one or more tops that all alias the bottom's data."""

    exact_num_bottom = 1
    min_num_top = 1

    def reshape(self, bottom, top):
        for i, blob in enumerate(top):
            if blob is bottom[0]:
                raise self.error(f"Split layer does not allow in-place computation "
                                 f"(top[{i}] is the bottom)")
            blob.reshape_like(bottom[0])
            blob.share_data(bottom[0])

    def forward_cpu(self, bottom, top):
        # Reshape (run just before) already made every top alias the bottom's data.
        for blob in top:
            blob.share_data(bottom[0])

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        # Same summation order as Caffe: ((t0 + t1) + t2) + ..., in float32, in one pass.
        eltwise.sum_scaled(tuple(blob.flat_diff for blob in top), np.float32(1.0),
                           bottom[0].flat_diff)

    # --- GPU ---------------------------------------------------------------------------
    def forward_gpu(self, bottom, top):
        self.forward_cpu(bottom, top)  # only shares: touches no data

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        out = bottom[0].mutable_gpu_diff
        if len(top) == 1:
            memory.copy(top[0].gpu_diff, out)
            return
        n = bottom[0].count()
        gpu_math.add(n, top[0].gpu_diff, top[1].gpu_diff, out)
        for blob in top[2:]:
            gpu_math.add(n, out, blob.gpu_diff, out)
