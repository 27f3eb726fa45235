"""LSTMUnit: one timestep of an LSTM cell (Caffe's LSTMUnitLayer).

Bottoms: c_prev (1, N, D), the gate inputs x (1, N, 4D) in Caffe's order (i, f, o, g), and the
sequence continuation indicators cont (1, N). Tops: c (1, N, D) and h (1, N, D).

    i = sigmoid(x_i)    f = cont * sigmoid(x_f)  (0 where cont == 0)
    o = sigmoid(x_o)    g = tanh(x_g)
    c = f * c_prev + i * g
    h = o * tanh(c)

Backward, with dc_total = dc + dh * o * (1 - tanh(c)^2):

    dc_prev = dc_total * f
    dx_i = dc_total * g * i (1 - i)          dx_f = dc_total * c_prev * f (1 - f)
    dx_o = dh * tanh(c) * o (1 - o)          dx_g = dc_total * i * (1 - g^2)

(``dx_f`` uses the masked f, as Caffe does; for binary cont it is the exact derivative.)
There is no gradient for cont: asking for one is an error.

GPU mode: one kernel per direction, one thread per (stream, hidden unit), the gates evaluated
in float32 (sigmoid as 0.5 tanh(x / 2) + 0.5, as the CPU path, which evaluates in float64).
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import Layer, register

ONE = np.float32(1)


def _sigmoid(x):
    """Float32 sigmoid evaluated in double precision (no overflow for large |x|)."""
    return (0.5 * np.tanh(0.5 * x.astype(np.float64)) + 0.5).astype(np.float32)


def _tanh(x):
    return np.tanh(x.astype(np.float64)).astype(np.float32)


def _gates(x, cont, hidden):
    """(i, f, o, g), each (N, D) float32, from gate inputs (N, 4D) and cont (N,)."""
    gates = x.reshape(-1, 4, hidden)
    i = _sigmoid(gates[:, 0])
    f = cont[:, None] * _sigmoid(gates[:, 1])
    f[cont == 0] = 0
    o = _sigmoid(gates[:, 2])
    g = _tanh(gates[:, 3])
    return i, f, o, g


@register("LSTMUnit")
class LSTMUnitLayer(Layer):
    """c_t, h_t from c_{t-1}, the gate inputs and cont_t (no parameters)."""

    exact_num_bottom = 3
    exact_num_top = 2

    def reshape(self, bottom, top):
        num = bottom[0].shape_at(1) if bottom[0].num_axes > 1 else None
        for index, blob in enumerate(bottom):
            axes = 2 if index == 2 else 3
            if blob.num_axes != axes or blob.shape[0] != 1 or blob.shape[1] != num:
                raise self.error(
                    f"bottom[{index}] must have shape (1, N{', ...' if axes == 3 else ''}) "
                    f"with {axes} axes and N = {num} (the streams of c_prev); got "
                    f"{blob.shape_string()}")
        self.hidden = bottom[0].shape[2]
        if bottom[1].shape[2] != 4 * self.hidden:
            raise self.error(f"the gate input bottom[1] must have 4 * {self.hidden} = "
                             f"{4 * self.hidden} channels (i, f, o, g), got "
                             f"{bottom[1].shape_string()}")
        top[0].reshape_like(bottom[0])
        top[1].reshape_like(bottom[0])

    def allow_force_backward(self, bottom_index):
        return bottom_index != 2

    def _unpack(self, bottom):
        c_prev = bottom[0].data.reshape(-1, self.hidden)
        x = bottom[1].data.reshape(-1, 4 * self.hidden)
        cont = bottom[2].data.reshape(-1)
        return c_prev, x, cont

    def forward_cpu(self, bottom, top):
        c_prev, x, cont = self._unpack(bottom)
        i, f, o, g = _gates(x, cont, self.hidden)
        c = f * c_prev + i * g
        top[0].data[...] = c.reshape(top[0].shape)
        top[1].data[...] = (o * _tanh(c)).reshape(top[1].shape)

    def backward_cpu(self, top, propagate_down, bottom):
        if propagate_down[2]:
            raise self.error("Cannot backpropagate to sequence indicators (bottom[2], cont).")
        if not (propagate_down[0] or propagate_down[1]):
            return
        c_prev, x, cont = self._unpack(bottom)
        i, f, o, g = _gates(x, cont, self.hidden)
        tanh_c = _tanh(top[0].data.reshape(-1, self.hidden))
        dc = top[0].diff.reshape(-1, self.hidden)
        dh = top[1].diff.reshape(-1, self.hidden)
        dc_total = dc + dh * o * (ONE - tanh_c * tanh_c)
        if propagate_down[1]:
            dx = bottom[1].diff.reshape(-1, 4, self.hidden)
            dx[:, 0] = dc_total * g * i * (ONE - i)
            dx[:, 1] = dc_total * c_prev * f * (ONE - f)
            dx[:, 2] = dh * tanh_c * o * (ONE - o)
            dx[:, 3] = dc_total * i * (ONE - g * g)
        if propagate_down[0]:
            bottom[0].diff[...] = (dc_total * f).reshape(bottom[0].shape)

    # --- GPU -------------------------------------------------------------------------
    def forward_gpu(self, bottom, top):
        c_prev, x, cont = (blob.gpu_data for blob in bottom)
        launch(_forward_kernel, bottom[0].count(), self.hidden, c_prev, x, cont,
               top[0].mutable_gpu_data, top[1].mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        if propagate_down[2]:
            raise self.error("Cannot backpropagate to sequence indicators (bottom[2], cont).")
        if not (propagate_down[0] or propagate_down[1]):
            return
        c_prev, x, cont = (blob.gpu_data for blob in bottom)
        dc, dh = (blob.gpu_diff for blob in top)
        # an output not asked for gets a read-only stand-in the kernel never writes
        dc_prev = bottom[0].mutable_gpu_diff if propagate_down[0] else dc
        dx = bottom[1].mutable_gpu_diff if propagate_down[1] else dc
        launch(_backward_kernel, bottom[0].count(), self.hidden, c_prev, x, cont,
               top[0].gpu_data, dc, dh, bool(propagate_down[0]),
               bool(propagate_down[1]), dc_prev, dx)


HALF = np.float32(0.5)


@cuda.jit(device=True)
def _gpu_sigmoid(value):
    return HALF * math.tanh(HALF * value) + HALF


@cuda.jit(device=True)
def _gpu_gates(x, cont, row, base, hidden):
    """(i, f, o, g) of one unit; f is 0 where cont is 0."""
    i = _gpu_sigmoid(x[base])
    f = np.float32(0.0)
    if cont[row] != 0:
        f = cont[row] * _gpu_sigmoid(x[base + hidden])
    o = _gpu_sigmoid(x[base + 2 * hidden])
    g = math.tanh(x[base + 3 * hidden])
    return i, f, o, g


@cuda.jit(cache=True)
def _forward_kernel(n, hidden, c_prev, x, cont, c, h):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        row = index // hidden
        base = row * 4 * hidden + index % hidden
        i, f, o, g = _gpu_gates(x, cont, row, base, hidden)
        cell = f * c_prev[index] + i * g
        c[index] = cell
        h[index] = o * math.tanh(cell)


@cuda.jit(cache=True)
def _backward_kernel(n, hidden, c_prev, x, cont, c, dc, dh, to_c_prev, to_x, dc_prev, dx):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        row = index // hidden
        base = row * 4 * hidden + index % hidden
        i, f, o, g = _gpu_gates(x, cont, row, base, hidden)
        tanh_c = math.tanh(c[index])
        dc_total = dc[index] + dh[index] * o * (ONE - tanh_c * tanh_c)
        if to_x:
            dx[base] = dc_total * g * i * (ONE - i)
            dx[base + hidden] = dc_total * c_prev[index] * f * (ONE - f)
            dx[base + 2 * hidden] = dh[index] * tanh_c * o * (ONE - o)
            dx[base + 3 * hidden] = dc_total * i * (ONE - g * g)
        if to_c_prev:
            dc_prev[index] = dc_total * f
