"""Reduction: reduce all axes from ``axis`` on to one number (Caffe's ReductionLayer).

With the bottom viewed as (num, dim), num = count(0, axis), dim = count(axis), and c = coeff
(MEAN: c = coeff / dim), the top has shape bottom.shape[:axis] (a scalar for axis 0):

    SUM, MEAN:  y = c * sum_j x_j           dx_j = c * dy
    ASUM:       y = c * sum_j |x_j|         dx_j = c * dy * sign(x_j)      (sign(0) = 0)
    SUMSQ:      y = c * sum_j x_j^2         dx_j = 2 c * dy * x_j

GPU mode: forward reduces each row in one thread block (a fixed-order shared-memory tree in
float64, as the CPU adds in float64); backward is one thread per bottom element.
"""
import numpy as np
from numba import cuda

from pycaffe_cli.cuda import launch as launching
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.views import layer_axis
from pycaffe_cli.proto import caffe_pb2

Op = caffe_pb2.ReductionParameter
ASUM, SUMSQ = Op.ASUM, Op.SUMSQ
REDUCE_THREADS = 256  # threads per row at most (a power of two: the tree halves it)


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

    # --- GPU ---------------------------------------------------------------------------
    def forward_gpu(self, bottom, top):
        if self.num == 0:
            return
        # A power of two for the tree: enough for the row, at most a full block.
        cap = min(REDUCE_THREADS, launching.THREADS_PER_BLOCK)
        threads = 1
        while threads < self.dim and threads * 2 <= cap:
            threads *= 2
        blocks = min(self.num, launching.MAX_BLOCKS)
        _row_reduce_kernel[blocks, threads](self.num, int(self.op), self.dim,
                                            bottom[0].gpu_data,
                                            np.float64(self.coeff), top[0].mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        if propagate_down[0]:
            launch(_reduction_backward_kernel, self.num * self.dim, int(self.op), self.dim,
                   bottom[0].gpu_data, top[0].gpu_diff,
                   self.coeff, bottom[0].mutable_gpu_diff)


@cuda.jit(cache=True)
def _row_reduce_kernel(num, op, dim, x, coeff, y):
    """y[row] = coeff * sum_j f(x[row, j]): one block per row, float64 partial sums."""
    shared = cuda.shared.array(REDUCE_THREADS, np.float64)
    tid = cuda.threadIdx.x
    for row in range(cuda.blockIdx.x, num, cuda.gridDim.x):
        total = 0.0
        for j in range(tid, dim, cuda.blockDim.x):
            value = np.float64(x[row * dim + j])
            if op == ASUM:
                total += abs(value)
            elif op == SUMSQ:
                total += value * value
            else:
                total += value
        shared[tid] = total
        cuda.syncthreads()
        step = cuda.blockDim.x // 2
        while step > 0:
            if tid < step:
                shared[tid] += shared[tid + step]
            cuda.syncthreads()
            step //= 2
        if tid == 0:  # only thread 0 writes shared[0] again for the next row: no barrier
            y[row] = np.float32(shared[0] * coeff)


@cuda.jit(cache=True)
def _reduction_backward_kernel(n, op, dim, x, top_diff, coeff, bottom_diff):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        scale = top_diff[index // dim] * coeff
        if op == ASUM:
            value = x[index]
            if value > 0:
                bottom_diff[index] = scale
            elif value < 0:
                bottom_diff[index] = -scale
            else:
                bottom_diff[index] = 0
        elif op == SUMSQ:
            bottom_diff[index] = x[index] * (scale + scale)
        else:
            bottom_diff[index] = scale
