"""Bias: add a broadcast bias to the bottom (Caffe's BiasLayer).

The bias b is bottom[1] or a learnable blob. Its shape must equal bottom[0]'s shape over the
axes [axis, axis + b.num_axes); bottom[0] is viewed as (outer, bias_dim, inner) around them
(a scalar bias uses axis 0):

    forward:   y[o, d, i] = x[o, d, i] + b[d]
    backward:  dx = dy;   db[d] = sum_{o, i} dy[o, d, i]

A learnable bias has the shape bottom[0].shape[axis:axis + num_axes] (num_axes -1: to the end)
and is filled by ``filler`` (default constant 0); its gradient accumulates, while a bias given
as bottom[1] has its diff overwritten. In-place computation is allowed.
"""
import numpy as np

from pycaffe_cli.blob import Blob
from pycaffe_cli.fillers import fill
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.views import layer_axis


def broadcast_param_shape(layer, bottom, axis_param, num_axes, what):
    """The shape of a learnable ``what`` blob: bottom.shape[axis:axis + num_axes]."""
    axis = layer_axis(layer, bottom, axis_param)
    if num_axes < -1:
        raise layer.error(f"num_axes must be non-negative, or -1 to extend to the end of "
                          f"bottom[0] (got {num_axes})")
    if num_axes >= 0 and bottom.num_axes < axis + num_axes:
        raise layer.error(f"{what} blob's shape extends past bottom[0]'s shape "
                          f"{bottom.shape_string()} when applied starting with bottom[0] "
                          f"axis = {axis} over num_axes = {num_axes}")
    end = bottom.num_axes if num_axes == -1 else axis + num_axes
    return bottom.shape[axis:end]


def broadcast_dims(layer, bottom, operand, axis_param, what):
    """(outer, dim, inner) of bottom around the axes ``operand`` covers from ``axis_param``.

    A scalar operand (no axes) always uses axis 0, as Caffe does.
    """
    axis = 0 if operand.num_axes == 0 else layer_axis(layer, bottom, axis_param)
    if bottom.num_axes < axis + operand.num_axes:
        raise layer.error(f"{what} blob's shape {operand.shape_string()} extends past "
                          f"bottom[0]'s shape {bottom.shape_string()} when applied starting "
                          f"with bottom[0] axis = {axis}")
    covered = bottom.shape[axis:axis + operand.num_axes]
    if covered != operand.shape:
        raise layer.error(f"dimension mismatch between bottom[0] {bottom.shape_string()} "
                          f"axes {axis}..{axis + operand.num_axes - 1} and the {what} "
                          f"{operand.shape_string()}")
    return (bottom.count(0, axis), operand.count(),
            bottom.count(axis + operand.num_axes))


@register("Bias")
class BiasLayer(Layer):
    """bias_param: axis (default 1), num_axes (default 1), filler (default constant 0)."""

    min_num_bottom = 1
    max_num_bottom = 2
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.param.bias_param
        if len(bottom) == 1 and not self.blobs:
            shape = broadcast_param_shape(self, bottom[0], p.axis, p.num_axes, "bias")
            self.blobs = [Blob(shape)]
            fill(self.blobs[0], p.filler, self.name)
        self.param_propagate_down = [True] * len(self.blobs)

    def _bias(self, bottom):
        return bottom[1] if len(bottom) > 1 else self.blobs[0]

    def reshape(self, bottom, top):
        self.dims = broadcast_dims(self, bottom[0], self._bias(bottom),
                                   self.param.bias_param.axis, "bias")
        if top[0] is not bottom[0]:
            top[0].reshape_like(bottom[0])

    def forward_cpu(self, bottom, top):
        outer, dim, inner = self.dims
        bias = self._bias(bottom).data.reshape(1, dim, 1)
        np.add(bottom[0].data.reshape(outer, dim, inner), bias,
               out=top[0].data.reshape(outer, dim, inner))

    def backward_cpu(self, top, propagate_down, bottom):
        outer, dim, inner = self.dims
        dy = top[0].diff.reshape(outer, dim, inner)
        learnable = len(bottom) == 1
        if learnable and self.param_propagate_down[0]:
            self.blobs[0].flat_diff[...] += dy.sum(axis=2).sum(axis=0, dtype=np.float64)
        elif not learnable and propagate_down[1]:
            bottom[1].flat_diff[...] = dy.sum(axis=2).sum(axis=0, dtype=np.float64)
        if propagate_down[0] and bottom[0] is not top[0]:
            bottom[0].diff[...] = top[0].diff
