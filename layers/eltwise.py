"""Eltwise: combine same-shaped bottoms element by element (Caffe's EltwiseLayer).

* SUM:  top = sum_i c_i * b_i   (c_i from ``coeff``, default 1);  d b_i = c_i * d top
* PROD: top = prod_i b_i;  d b_i = d top * prod_{j != i} b_j  (``stable_prod_grad``, the
  default) or d top * top / b_i (which fails where b_i = 0)
* MAX:  top = max_i b_i;  d b_i = d top where b_i was the max, else 0. The argmax is Caffe's:
  between bottoms 0 and 1 a tie goes to bottom 1 (``b0 > b1`` picks 0), and from bottom 2 on a
  later bottom wins only if strictly larger.

The CPU passes of SUM and PROD, and MAX's forward-only pass, run one numba loop over the
elements (layers/kernels/cpu/eltwise.py); MAX's training pass keeps the winning bottom's index
for backward. In the inference plan, on the CPU, a ReLU that reads the top next runs in that
same loop (``EltwiseInferenceHooks.fuse_relu``).

GPU mode runs the same float32 operations in the same order on the device, one launch per
bottom (the kernels below and ``pycaffe_cli/cuda/math.py``); MAX keeps the winning bottom index in
a float32 device buffer.
"""
import numpy as np
from numba import cuda

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda import math as gpu_math
from pycaffe_cli.cuda import memory
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.inference_hooks import ReluFusingHooks
from pycaffe_cli.layers.kernels.cpu import eltwise as kernels
from pycaffe_cli.proto import caffe_pb2

SUM = caffe_pb2.EltwiseParameter.SUM
PROD = caffe_pb2.EltwiseParameter.PROD
MAX = caffe_pb2.EltwiseParameter.MAX


class EltwiseInferenceHooks(ReluFusingHooks):
    """The forward-only pass on the CPU keeps no MAX index (only backward reads it), and
    applies the ReLU the plan fuses into the layer (pycaffe_cli/inference/fold.py)."""

    def forward_pass(self):
        layer = self.layer
        return layer.forward_gpu if layer._use_gpu("forward") else layer._forward_values_cpu


@register("Eltwise", v1="ELTWISE")
class EltwiseLayer(Layer):
    """eltwise_param: operation (default SUM), coeff, stable_prod_grad (default true)."""

    min_num_bottom = 2
    exact_num_top = 1
    inference_hooks = EltwiseInferenceHooks
    # ReLU's negative slope to apply to the top (None: none): the inference plan's, on its
    # own copy of the layer, in CPU mode only (EltwiseInferenceHooks).
    _fused_relu_slope = None

    def layer_setup(self, bottom, top):
        param = self.param.eltwise_param
        self._op = param.operation
        coeff = list(param.coeff)
        if self._op == SUM and coeff and len(coeff) != len(bottom):
            raise self.error(f"Eltwise layer takes one coefficient per bottom blob: got "
                             f"{len(coeff)} coeff(s) for {len(bottom)} bottoms")
        if self._op == PROD and coeff:
            raise self.error("Eltwise layer only takes coefficients for summation "
                             "(operation SUM), not PROD")
        self._coeffs = coeff if (self._op == SUM and coeff) else [1.0] * len(bottom)
        self._kernel_coeffs = np.array(self._coeffs, np.float32)
        self._stable_prod_grad = param.stable_prod_grad
        self._max_index = None
        self._gpu_max_index = Blob()  # the device path's argmax (bottom index as a float)

    def reshape(self, bottom, top):
        for i, blob in enumerate(bottom[1:], start=1):
            if blob.shape != bottom[0].shape:
                raise self.error(f"all bottoms must have the same shape: bottom[0] is "
                                 f"{bottom[0].shape_string()}, bottom[{i}] is "
                                 f"{blob.shape_string()}")
        top[0].reshape_like(bottom[0])
        if self._op == MAX and (self._max_index is None
                                or self._max_index.shape != bottom[0].shape):
            self._max_index = np.zeros(bottom[0].shape, np.int32)
        if self._op == MAX:
            self._gpu_max_index.reshape_like(bottom[0])

    # --- forward ---------------------------------------------------------------------
    def forward_cpu(self, bottom, top):
        if self._op == MAX and self._fused_relu_slope is None:
            top[0].data[...] = self._max(bottom)
        else:  # a fused ReLU: the inference plan's layer, which never runs backward
            self._combine(bottom, top, self._fused_relu_slope)

    def _forward_values_cpu(self, bottom, top):
        """The top without MAX's index, and with the fused ReLU (EltwiseInferenceHooks)."""
        self._combine(bottom, top, self._fused_relu_slope)

    def _combine(self, bottom, top, relu_slope):
        rectified = relu_slope is not None
        kernels.combine(self._op, tuple(blob.data.reshape(-1) for blob in bottom),
                        self._kernel_coeffs, top[0].data.reshape(-1),
                        np.float32(relu_slope if rectified else 0), rectified)

    def _max(self, bottom):
        """Max over the bottoms, recording the winning bottom index for backward."""
        first, second = bottom[0].data, bottom[1].data
        take_first = first > second
        result = np.where(take_first, first, second)
        index = self._max_index
        index[...] = np.where(take_first, 0, 1)
        for i, blob in enumerate(bottom[2:], start=2):
            larger = blob.data > result
            result = np.where(larger, blob.data, result)
            index[larger] = i
        return result

    # --- backward --------------------------------------------------------------------
    def backward_cpu(self, top, propagate_down, bottom):
        top_diff = top[0].diff
        for i, blob in enumerate(bottom):
            if not propagate_down[i]:
                continue
            if self._op == SUM:
                kernels.sum_scaled((top[0].flat_diff,), np.float32(self._coeffs[i]),
                                   blob.flat_diff)
            elif self._op == PROD:
                blob.diff[...] = self._prod_grad(i, top, bottom) * top_diff
            else:
                blob.diff[...] = np.where(self._max_index == i, top_diff, np.float32(0))

    def _prod_grad(self, i, top, bottom):
        """d top / d b_i: the product of the other bottoms, or top / b_i when not stable."""
        if not self._stable_prod_grad:
            with np.errstate(divide="ignore", invalid="ignore"):  # inf/nan as in Caffe
                return top[0].data / bottom[i].data
        others = [blob.data for j, blob in enumerate(bottom) if j != i]
        result = others[0].copy()
        for data in others[1:]:
            result *= data
        return result

    # --- GPU ---------------------------------------------------------------------------
    def forward_gpu(self, bottom, top):
        n = top[0].count()
        out = top[0].mutable_gpu_data
        data = [blob.gpu_data for blob in bottom]
        if self._op == SUM:
            c = [np.float32(value) for value in self._coeffs]
            launch(_weighted_sum_kernel, n, c[0], data[0], c[1], data[1], out)
            for i in range(2, len(bottom)):
                launch(_weighted_sum_kernel, n, np.float32(1), out, c[i], data[i], out)
        elif self._op == PROD:
            gpu_math.mul(n, data[0], data[1], out)
            for x in data[2:]:
                gpu_math.mul(n, out, x, out)
        else:
            index = self._gpu_max_index.mutable_gpu_data
            launch(_max_first_kernel, n, data[0], data[1], out, index)
            for i in range(2, len(bottom)):
                launch(_max_next_kernel, n, data[i], np.float32(i), out, index)

    def backward_gpu(self, top, propagate_down, bottom):
        n = top[0].count()
        top_diff = top[0].gpu_diff
        for i, blob in enumerate(bottom):
            if not propagate_down[i]:
                continue
            diff = blob.mutable_gpu_diff
            if self._op == SUM:
                c = self._coeffs[i]
                if c == 1.0:
                    memory.copy(top_diff, diff)
                else:
                    gpu_math.axpby(n, c, top_diff, 0.0, diff)
            elif self._op == PROD:
                self._prod_grad_gpu(i, top, bottom, diff)
                gpu_math.mul(n, diff, top_diff, diff)
            else:
                launch(_max_backward_kernel, n, self._gpu_max_index.gpu_data,
                       np.float32(i), top_diff, diff)

    def _prod_grad_gpu(self, i, top, bottom, out):
        """out = d top / d b_i, as ``_prod_grad`` computes it."""
        n = top[0].count()
        if not self._stable_prod_grad:
            gpu_math.div(n, top[0].gpu_data, bottom[i].gpu_data,
                         out)
            return
        others = [blob.gpu_data for j, blob in enumerate(bottom) if j != i]
        memory.copy(others[0], out)
        for data in others[1:]:
            gpu_math.mul(n, out, data, out)


@cuda.jit(cache=True)
def _weighted_sum_kernel(n, a, x, b, y, out):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        out[index] = a * x[index] + b * y[index]


@cuda.jit(cache=True)
def _max_first_kernel(n, x0, x1, out, max_index):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        first = x0[index]
        second = x1[index]
        if first > second:
            out[index] = first
            max_index[index] = 0
        else:
            out[index] = second
            max_index[index] = 1


@cuda.jit(cache=True)
def _max_next_kernel(n, x, which, out, max_index):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        value = x[index]
        if value > out[index]:
            out[index] = value
            max_index[index] = which


@cuda.jit(cache=True)
def _max_backward_kernel(n, max_index, which, top_diff, diff):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        if max_index[index] == which:
            diff[index] = top_diff[index]
        else:
            diff[index] = 0
