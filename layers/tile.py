"""Tile: repeat the bottom ``tiles`` times along ``axis`` (Caffe's TileLayer).

With the bottom viewed as (outer, inner), outer = count(0, axis), inner = count(axis):

    forward:   y[o, t, :] = x[o, :]          for t in 0..tiles-1   (top.shape[axis] *= tiles)
    backward:  dx[o, :] = sum_t dy[o, t, :]

GPU mode: forward is a strided copy with a stride-0 tiles axis (``pycaffe_cli/cuda/copy.py``);
backward gathers, one thread per bottom element adding its tiles in order.
"""
import numpy as np
from numba import cuda

from pycaffe_cli.cuda import copy
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.views import layer_axis


@register("Tile")
class TileLayer(Layer):
    """tile_param: axis (default 1), tiles (required, > 0)."""

    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.param.tile_param
        if not p.HasField("tiles"):
            raise self.error("Number of tiles must be specified (tile_param.tiles)")
        if p.tiles <= 0:
            raise self.error(f"Number of tiles must be positive, got {p.tiles}")
        self.tiles = p.tiles

    def reshape(self, bottom, top):
        axis = layer_axis(self, bottom[0], self.param.tile_param.axis)
        shape = list(bottom[0].shape)
        shape[axis] *= self.tiles
        top[0].reshape(shape)
        self.outer, self.inner = bottom[0].count(0, axis), bottom[0].count(axis)

    def forward_cpu(self, bottom, top):
        x = bottom[0].data.reshape(self.outer, 1, self.inner)
        top[0].data.reshape(self.outer, self.tiles, self.inner)[...] = x

    def backward_cpu(self, top, propagate_down, bottom):
        if propagate_down[0]:
            dy = top[0].diff.reshape(self.outer, self.tiles, self.inner)
            dy.sum(axis=1, out=bottom[0].diff.reshape(self.outer, self.inner))

    # --- GPU ---------------------------------------------------------------------------
    def forward_gpu(self, bottom, top):
        copy.tile(bottom[0].gpu_data, top[0].mutable_gpu_data, self.outer, self.tiles,
                  self.inner)

    def backward_gpu(self, top, propagate_down, bottom):
        if propagate_down[0]:
            launch(_tile_backward_kernel, self.outer * self.inner,
                   top[0].gpu_diff, self.tiles, self.inner, bottom[0].mutable_gpu_diff)


@cuda.jit(cache=True)
def _tile_backward_kernel(n, top_diff, tiles, inner, bottom_diff):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        start = (index // inner) * tiles * inner + index % inner
        total = np.float32(0)
        for t in range(tiles):
            total += top_diff[start + t * inner]
        bottom_diff[index] = total
