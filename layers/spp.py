"""SPP: spatial pyramid pooling (Caffe's SPPLayer).

Level l of a pyramid of height L pools the (N, C, H, W) input into about 2^l x 2^l bins with
(Caffe's GetPoolingParam, per axis)

    bins = 2^l,  kernel = ceil(H / bins),  pad = (kernel * bins - H + 1) / 2,  stride = kernel

and the top is the levels' outputs, each flattened to (N, C * bins_h * bins_w), concatenated
in level order: (N, C * sum_l 4^l) when every level yields bins x bins. With L = 1 the top is
the single level's (N, C, 1, 1) output, as in Caffe. Backward sums the levels' gradients.
On the GPU the levels pool on the device and device copies assemble the top (and split its
gradient back).
"""
import math

import numpy as np

from pycaffe_cli.blob import Blob
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.pooling import PoolingLayer
from pycaffe_cli.proto import caffe_pb2

_POOL = {
    caffe_pb2.SPPParameter.MAX: caffe_pb2.PoolingParameter.MAX,
    caffe_pb2.SPPParameter.AVE: caffe_pb2.PoolingParameter.AVE,
    caffe_pb2.SPPParameter.STOCHASTIC: caffe_pb2.PoolingParameter.STOCHASTIC,
}


def level_geometry(level, size):
    """(kernel, pad) along one axis of ``size`` for pyramid level ``level``."""
    bins = 2 ** level
    kernel = math.ceil(size / bins)
    remainder = kernel * bins - size
    return kernel, (remainder + 1) // 2


@register("SPP", v1="SPP")
class SPPLayer(Layer):
    """spp_param: pyramid_height (> 0), pool (MAX, AVE or STOCHASTIC), engine (ignored)."""

    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        self.pyramid_height = int(self.param.spp_param.pyramid_height)
        if self.pyramid_height < 1:
            raise self.error(f"spp_param pyramid_height must be at least 1, got "
                             f"{self.pyramid_height}")
        self._input_shape = None
        self._levels = []

    def reshape(self, bottom, top):
        source = bottom[0]
        if source.num_axes != 4:
            raise self.error(f"input must have 4 axes, corresponding to (num, channels, "
                             f"height, width); got {source.shape_string()}")
        if top[0] is source:
            raise self.error("SPP layer does not allow in-place computation")
        if source.shape[2] <= 0 or source.shape[3] <= 0:
            raise self.error(f"input dimensions cannot be zero: {source.shape_string()}")
        if source.shape != self._input_shape:
            self._levels = [self._make_level(level, source)
                            for level in range(self.pyramid_height)]
            self._input_shape = source.shape
        for level in self._levels:
            level.reshape(source)
        if self.pyramid_height == 1:
            top[0].reshape(self._levels[0].top.shape)
        else:
            width = sum(level.top.count(1) for level in self._levels)
            top[0].reshape((source.shape[0], width))

    def _make_level(self, level, source):
        height, width = source.shape[2:]
        (kernel_h, pad_h), (kernel_w, pad_w) = (level_geometry(level, height),
                                                level_geometry(level, width))
        param = caffe_pb2.LayerParameter(name=self.name, type="Pooling", phase=self.phase)
        pool = param.pooling_param
        pool.pool = _POOL[self.param.spp_param.pool]
        pool.kernel_h, pool.kernel_w = kernel_h, kernel_w
        pool.pad_h, pool.pad_w = pad_h, pad_w
        pool.stride_h, pool.stride_w = kernel_h, kernel_w
        try:
            return _Level(PoolingLayer(param), source)
        except CaffeError as error:
            detail = str(error).removeprefix(f'layer "{self.name}": ')
            raise self.error(f"pyramid level {level} of a {height}x{width} input (kernel "
                             f"{kernel_h}x{kernel_w}, pad {pad_h}x{pad_w}): {detail}") from None

    def forward_cpu(self, bottom, top):
        if self.pyramid_height == 1:
            self._levels[0].forward(bottom[0], top[0])
            return
        offset = 0
        for level in self._levels:
            level.forward(bottom[0])
            width = level.top.count(1)
            top[0].data[:, offset:offset + width] = level.top.data.reshape(-1, width)
            offset += width

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        if self.pyramid_height == 1:
            self._levels[0].backward(top[0], bottom[0].diff)
            return
        offset = 0
        total = bottom[0].diff
        for i, level in enumerate(self._levels):
            width = level.top.count(1)
            level.top.diff.reshape(-1, width)[...] = top[0].diff[:, offset:offset + width]
            offset += width
            # Caffe's Split sums in order: ((d0 + d1) + d2) + ...
            if i == 0:
                level.backward(level.top, total)
            else:
                np.add(total, level.backward(level.top), out=total)


    def forward_gpu(self, bottom, top):
        if self.pyramid_height == 1:
            self._levels[0].forward(bottom[0], top[0])
            return
        from pycaffe_cli.cuda import copy
        num, total, offset = bottom[0].shape[0], top[0].count(1), 0
        y = top[0].mutable_gpu_data
        for level in self._levels:
            level.forward(bottom[0])
            width = level.top.count(1)
            copy.copy_block(level.top.gpu_data, y, num, width, 1, width, 0,
                            total, offset)
            offset += width

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        from pycaffe_cli.cuda import copy, math, memory
        dx = bottom[0].mutable_gpu_diff
        if self.pyramid_height == 1:
            memory.copy(self._levels[0].device_backward(top[0]), dx)
            return
        num, total, offset = bottom[0].shape[0], top[0].count(1), 0
        dy = top[0].gpu_diff
        for i, level in enumerate(self._levels):
            width = level.top.count(1)
            copy.copy_block(dy, level.top.mutable_gpu_diff, num, width, 1, total, offset, width, 0)
            offset += width
            grad = level.device_backward(level.top)
            if i == 0:
                memory.copy(grad, dx)
            else:   # Caffe's Split sums in order: ((d0 + d1) + d2) + ...
                math.add(dx.size, dx, grad, dx)


class _Level:
    """One pyramid level: a Pooling layer reading the SPP bottom through its own Blob, so its
    gradient lands in a private diff."""

    def __init__(self, pooling, source):
        self.pooling = pooling
        self.bottom = Blob(source.shape)
        self.top = Blob()
        self.bottom.share_data(source)
        pooling.setup([self.bottom], [self.top])

    def reshape(self, source):
        self.bottom.reshape_like(source)
        self.bottom.share_data(source)
        self.pooling.reshape([self.bottom], [self.top])

    def forward(self, source, top=None):
        self.bottom.share_data(source)
        self.pooling.forward([self.bottom], [top if top is not None else self.top])

    def device_backward(self, top):
        """Run the pooling backward from ``top``; return the gradient's flat device view."""
        self.pooling.backward([top], [True], [self.bottom])
        return self.bottom.gpu_diff

    def backward(self, top, out=None):
        """Run the pooling backward from ``top``; return the gradient (written to ``out``)."""
        self.pooling.backward([top], [True], [self.bottom])
        if out is not None:
            out[...] = self.bottom.diff
        return self.bottom.diff
