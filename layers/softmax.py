"""Softmax over one axis (Caffe's SoftmaxLayer).

With the bottom viewed as (outer, C, inner), C = shape[axis]:

    forward:   y_c = exp(x_c - max_k x_k) / sum_k exp(x_k - max_k x_k)
    backward:  dx = (dy - sum_c dy_c y_c) * y

Both passes work in place (the top may be the bottom blob). In GPU mode both run on the
device (kernels/cuda/loss.py: a per-position max / sum or dot, then a per-element pass).
"""
import numpy as np

from pycaffe_cli.blob import Blob
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.kernels.cpu import softmax as softmax_rows
from pycaffe_cli.layers.kernels.cuda import loss as gpu
from pycaffe_cli.layers.views import layer_axis, three_axis_view


def softmax_forward(x, out):
    """Write softmax(x) over axis 1 of the 3-d view ``x`` (outer, C, inner) into ``out``.

    ``out`` may be ``x`` itself.
    """
    outer, channels, inner = x.shape
    if inner == 1 and x.flags.c_contiguous and out.flags.c_contiguous:
        x, out = x.reshape(-1), out.reshape(-1)
        softmax_rows.shift_by_row_max(x, out, outer, channels)
        np.exp(out, out=out)
        softmax_rows.divide_by_row_sums(out, outer, channels)
        return
    peak = x.max(axis=1, keepdims=True)
    np.subtract(x, peak, out=out)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)


def softmax_backward(y, dy, out):
    """Write (dy - sum_c dy_c y_c) * y into ``out``; views are (outer, C, inner), ``out``
    may be ``dy``."""
    dot = np.einsum("ocj,ocj->oj", dy, y)[:, None, :]
    np.subtract(dy, dot, out=out)
    out *= y


@register("Softmax", v1="SOFTMAX")
class SoftmaxLayer(Layer):
    """y = softmax(x) along ``softmax_param.axis``."""

    exact_num_bottom = 1
    exact_num_top = 1
    in_place_ok = True

    def layer_setup(self, bottom, top):
        self._scratch = Blob()  # GPU: per-position max and sum (forward) or dot (backward)

    def reshape(self, bottom, top):
        self.axis = layer_axis(self, bottom[0], self.param.softmax_param.axis)
        self.dims = axis_dims(bottom[0], self.axis)
        self._scratch.reshape((2 * self.dims[0] * self.dims[2],))
        top[0].reshape_like(bottom[0])

    def forward_cpu(self, bottom, top):
        softmax_forward(three_axis_view(bottom[0].data, self.axis),
                        three_axis_view(top[0].data, self.axis))

    def backward_cpu(self, top, propagate_down, bottom):
        if propagate_down[0]:
            softmax_backward(three_axis_view(top[0].data, self.axis),
                             three_axis_view(top[0].diff, self.axis),
                             three_axis_view(bottom[0].diff, self.axis))

    def forward_gpu(self, bottom, top):
        gpu.softmax_forward(bottom[0].gpu_data, top[0].mutable_gpu_data, *self.dims,
                            self._scratch.mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        gpu.softmax_backward(top[0].gpu_data, top[0].gpu_diff,
                             bottom[0].mutable_gpu_diff, *self.dims, self._scratch.mutable_gpu_data)


def axis_dims(blob, axis):
    """(outer, channels, inner): the counts before, at and after ``axis``."""
    return blob.count(0, axis), blob.shape[axis], blob.count(axis + 1)
