"""Bias: add a broadcast bias to the bottom (Caffe's BiasLayer).

The bias b is bottom[1] or a learnable blob. Its shape must equal bottom[0]'s shape over the
axes [axis, axis + b.num_axes); bottom[0] is viewed as (outer, bias_dim, inner) around them
(a scalar bias uses axis 0):

    forward:   y[o, d, i] = x[o, d, i] + b[d]
    backward:  dx = dy;   db[d] = sum_{o, i} dy[o, d, i]

A learnable bias has the shape bottom[0].shape[axis:axis + num_axes] (num_axes -1: to the end)
and is filled by ``filler`` (default constant 0); its gradient accumulates, while a bias given
as bottom[1] has its diff overwritten. In-place computation is allowed.

GPU mode: forward is one thread per element; the bias gradient gathers without atomics in
two fixed-order passes, in float64 as on the CPU: one thread per (o, d) sums over i, then
one thread per d sums those over o (``BroadcastGradient``, which Scale uses too).
"""
import numpy as np
from numba import cuda

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda import memory
from pycaffe_cli.cuda.launch import launch
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
    in_place_ok = True

    def layer_setup(self, bottom, top):
        p = self.param.bias_param
        if len(bottom) == 1 and not self.blobs:
            shape = broadcast_param_shape(self, bottom[0], p.axis, p.num_axes, "bias")
            self.blobs = [Blob(shape)]
            fill(self.blobs[0], p.filler, self.name)
        self.param_propagate_down = [True] * len(self.blobs)
        self._gpu_gradient = BroadcastGradient()

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

    # --- GPU ---------------------------------------------------------------------------
    def forward_gpu(self, bottom, top):
        outer, dim, inner = self.dims
        broadcast(bottom[0].gpu_data, self._bias(bottom).gpu_data,
                  dim, inner, False, top[0].mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        dy = top[0].gpu_diff
        learnable = len(bottom) == 1
        if learnable and self.param_propagate_down[0]:
            self._gpu_gradient.run(self.dims, dy, None, self.blobs[0].mutable_gpu_diff, True)
        elif not learnable and propagate_down[1]:
            self._gpu_gradient.run(self.dims, dy, None, bottom[1].mutable_gpu_diff, False)
        if propagate_down[0] and bottom[0] is not top[0]:
            memory.copy(dy, bottom[0].mutable_gpu_diff)


def broadcast(x, operand, dim, inner, multiply, y):
    """y (outer, dim, inner) = x * operand[d] (``multiply``) or x + operand[d]; y may be x."""
    launch(_broadcast_kernel, y.size, x, operand, dim, inner, bool(multiply), y)


class BroadcastGradient:
    """out[d] (+)= sum over (o, i) of dy[o, d, i] (times x[o, d, i] when given), gathered in
    two passes through a float64 buffer of outer * dim partial sums (grown on demand)."""

    def __init__(self):
        self._partials = None

    def run(self, dims, dy, x, out, accumulate):
        outer, dim, inner = dims
        if dim == 0:
            return
        if self._partials is None or self._partials.size < max(outer * dim, 1):
            self._partials = memory.empty(max(outer * dim, 1), np.float64)
        partials = self._partials
        launch(_inner_sums_kernel, outer * dim, dy, dy if x is None else x, x is not None,
               inner, partials)
        launch(_outer_sums_kernel, dim, partials, outer, bool(accumulate), out)


@cuda.jit(cache=True)
def _broadcast_kernel(n, x, operand, dim, inner, multiply, y):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        value = operand[(index // inner) % dim]
        if multiply:
            y[index] = x[index] * value
        else:
            y[index] = x[index] + value


@cuda.jit(cache=True)
def _inner_sums_kernel(n, dy, x, use_x, inner, partials):
    """partials[r] = sum_i dy[r, i] (* x[r, i]) for r = o * dim + d, in float64."""
    for row in range(cuda.grid(1), n, cuda.gridsize(1)):
        total = 0.0
        start = row * inner
        for i in range(start, start + inner):
            if use_x:
                total += np.float64(dy[i] * x[i])
            else:
                total += np.float64(dy[i])
        partials[row] = total


@cuda.jit(cache=True)
def _outer_sums_kernel(n, partials, outer, accumulate, out):
    """out[d] = (out[d] if accumulate) + sum_o partials[o * n + d], rounded to float32 once."""
    for d in range(cuda.grid(1), n, cuda.gridsize(1)):
        total = 0.0
        for o in range(outer):
            total += partials[o * n + d]
        if accumulate:
            total += np.float64(out[d])
        out[d] = np.float32(total)
