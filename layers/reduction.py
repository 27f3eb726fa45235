"""Reduction: reduce all axes from ``axis`` on to one number (Caffe's ReductionLayer).

With the bottom viewed as (num, dim), num = count(0, axis), dim = count(axis), and c = coeff
(MEAN: c = coeff / dim), the top has shape bottom.shape[:axis] (a scalar for axis 0):

    SUM, MEAN:  y = c * sum_j x_j           dx_j = c * dy
    ASUM:       y = c * sum_j |x_j|         dx_j = c * dy * sign(x_j)      (sign(0) = 0)
    SUMSQ:      y = c * sum_j x_j^2         dx_j = 2 c * dy * x_j
"""
import numpy as np

from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.views import layer_axis
from pycaffe_cli.proto import caffe_pb2

Op = caffe_pb2.ReductionParameter


def _sum(rows):
    return rows.sum(axis=1, dtype=np.float64)


def _asum(rows):
    return np.abs(rows).sum(axis=1, dtype=np.float64)


def _sumsq(rows):
    return np.einsum("ij,ij->i", rows, rows, dtype=np.float64)


_FORWARD = {Op.SUM: _sum, Op.MEAN: _sum, Op.ASUM: _asum, Op.SUMSQ: _sumsq}


@register("Reduction")
class ReductionLayer(Layer):
    """reduction_param: operation (SUM, ASUM, SUMSQ, MEAN; default SUM), axis (0), coeff (1)."""

    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        self.op = self.param.reduction_param.operation
        if self.op not in _FORWARD:
            raise self.error(f"unknown reduction operation {self.op}")

    def reshape(self, bottom, top):
        p = self.param.reduction_param
        axis = layer_axis(self, bottom[0], p.axis)
        top[0].reshape(bottom[0].shape[:axis])
        self.num, self.dim = bottom[0].count(0, axis), bottom[0].count(axis)
        self.coeff = np.float32(p.coeff)
        if self.op == Op.MEAN:
            self.coeff = np.float32(self.coeff / np.float32(self.dim))

    def forward_cpu(self, bottom, top):
        rows = bottom[0].data.reshape(self.num, self.dim)
        top[0].data.reshape(self.num)[...] = _FORWARD[self.op](rows) * self.coeff

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        scale = (top[0].diff.reshape(self.num, 1) * self.coeff).astype(np.float32)
        dx = bottom[0].diff.reshape(self.num, self.dim)
        if self.op in (Op.SUM, Op.MEAN):
            dx[...] = scale
        elif self.op == Op.ASUM:
            np.multiply(np.sign(bottom[0].data.reshape(self.num, self.dim)), scale, out=dx)
        else:
            np.multiply(bottom[0].data.reshape(self.num, self.dim), 2 * scale, out=dx)
