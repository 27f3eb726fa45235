"""Direct (im2col-free) grouped convolution on the GPU (numba.cuda): the CPU kernels' names,
signatures and layouts (kernels/cpu/depthwise.py, whose module doc has the formula).

One thread per OUTPUT element in both element-wise passes, so neither needs atomics:

* ``forward``: an output element sums its window over the group's input channels, terms in
  (c, ki, kj) order (the CPU kernel's), then adds the bias;
* ``backward_data``: an input element GATHERS the outputs whose windows read it, as col2im
  does: for each output m of its group, the rows ``oh`` with h + pad_h - ki dilation_h =
  oh stride_h (0 <= oh < out_h) and likewise for the columns, terms in (m, ki, kj) order.

``weight_grad`` is a reduction: one block per weight element (a block takes elements
``blockIdx, blockIdx + gridDim, ...``); its threads walk the num x out_h x out_w positions in
a grid-stride order, add in float32, and fold their partial sums in shared memory
(channel_stats' fold), so the sums are the same on every run.

The per-element bodies are plain Python functions (``*_at_py``) compiled with
``device_function``, as in kernels/cuda/im2col.py.
"""
import numpy as np
from numba import cuda

from pycaffe_cli.cuda.device import device_function
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.kernels.cuda.channel_stats import REDUCE_THREADS, _fold, _reduce_launch
from pycaffe_cli.layers.kernels.geometry import conv_out_size_py

_conv_out_size = device_function(conv_out_size_py)


def forward_at_py(im, channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h,
                  stride_w, dilation_h, dilation_w, weights, out_channels, group, bias,
                  use_bias, out, out_h, out_w, index):
    """out[index] = its window's weighted sum (+ bias)."""
    ow = index % out_w
    oh = (index // out_w) % out_h
    m = (index // (out_w * out_h)) % out_channels
    n = index // (out_w * out_h * out_channels)
    per_in = channels // group
    first = n * channels + (m // (out_channels // group)) * per_in
    total = np.float32(0.0)
    for c in range(per_in):
        for ki in range(kernel_h):
            h = oh * stride_h - pad_h + ki * dilation_h
            if h >= 0 and h < height:
                row = ((first + c) * height + h) * width
                tap = ((m * per_in + c) * kernel_h + ki) * kernel_w
                for kj in range(kernel_w):
                    w = ow * stride_w - pad_w + kj * dilation_w
                    if w >= 0 and w < width:
                        total += weights[tap + kj] * im[row + w]
    if use_bias:
        total += bias[m]
    out[index] = total


def backward_data_at_py(out, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                        stride_h, stride_w, dilation_h, dilation_w, weights, out_channels,
                        group, im, out_h, out_w, index):
    """im[index] = the sum of the weighted outputs whose windows read that element."""
    w_pad = index % width + pad_w
    h_pad = (index // width) % height + pad_h
    c = (index // (width * height)) % channels
    n = index // (width * height * channels)
    per_in = channels // group
    per_out = out_channels // group
    first_m = (c // per_in) * per_out
    total = np.float32(0.0)
    for m in range(first_m, first_m + per_out):
        for ki in range(kernel_h):
            h_k = h_pad - ki * dilation_h
            oh = h_k // stride_h
            if h_k >= 0 and h_k % stride_h == 0 and oh < out_h:
                row = ((n * out_channels + m) * out_h + oh) * out_w
                tap = ((m * per_in + c % per_in) * kernel_h + ki) * kernel_w
                for kj in range(kernel_w):
                    w_k = w_pad - kj * dilation_w
                    ow = w_k // stride_w
                    if w_k >= 0 and w_k % stride_w == 0 and ow < out_w:
                        total += weights[tap + kj] * out[row + ow]
    im[index] = total


def weight_term_at_py(im, out, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                      stride_h, stride_w, dilation_h, dilation_w, out_channels, group, out_h,
                      out_w, weight, position):
    """The term of weight element ``weight`` at output ``position`` (n, oh, ow): the output
    times the input element its tap reads (0 in the padding)."""
    kj = weight % kernel_w
    ki = (weight // kernel_w) % kernel_h
    per_in = channels // group
    m = weight // (kernel_w * kernel_h * per_in)
    c = (m // (out_channels // group)) * per_in + (weight // (kernel_w * kernel_h)) % per_in
    ow = position % out_w
    oh = (position // out_w) % out_h
    n = position // (out_w * out_h)
    h = oh * stride_h - pad_h + ki * dilation_h
    w = ow * stride_w - pad_w + kj * dilation_w
    if h < 0 or h >= height or w < 0 or w >= width:
        return np.float32(0.0)
    return (out[((n * out_channels + m) * out_h + oh) * out_w + ow]
            * im[((n * channels + c) * height + h) * width + w])


_forward_at = device_function(forward_at_py)
_backward_data_at = device_function(backward_data_at_py)
_weight_term_at = device_function(weight_term_at_py)


@cuda.jit(cache=True)
def _forward_kernel(n, im, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                    stride_h, stride_w, dilation_h, dilation_w, weights, out_channels, group,
                    bias, use_bias, out):
    out_h = _conv_out_size(height, kernel_h, pad_h, stride_h, dilation_h)
    out_w = _conv_out_size(width, kernel_w, pad_w, stride_w, dilation_w)
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        _forward_at(im, channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h,
                    stride_w, dilation_h, dilation_w, weights, out_channels, group, bias,
                    use_bias, out, out_h, out_w, index)


@cuda.jit(cache=True)
def _backward_data_kernel(n, out, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                          stride_h, stride_w, dilation_h, dilation_w, weights, out_channels,
                          group, im):
    out_h = _conv_out_size(height, kernel_h, pad_h, stride_h, dilation_h)
    out_w = _conv_out_size(width, kernel_w, pad_w, stride_w, dilation_w)
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        _backward_data_at(out, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                          stride_h, stride_w, dilation_h, dilation_w, weights, out_channels,
                          group, im, out_h, out_w, index)


@cuda.jit(cache=True)
def _weight_grad_kernel(n_weights, im, out, num, channels, height, width, kernel_h, kernel_w,
                        pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w, out_channels,
                        group, weight_diff):
    # each block ends an iteration with a barrier: thread 0 has read the fold before any
    # thread writes the next element's partial sum
    shared = cuda.shared.array((1, REDUCE_THREADS), np.float32)
    tid = cuda.threadIdx.x
    out_h = _conv_out_size(height, kernel_h, pad_h, stride_h, dilation_h)
    out_w = _conv_out_size(width, kernel_w, pad_w, stride_w, dilation_w)
    positions = num * out_h * out_w
    for weight in range(cuda.blockIdx.x, n_weights, cuda.gridDim.x):
        total = np.float32(0.0)
        for position in range(tid, positions, cuda.blockDim.x):
            total += _weight_term_at(im, out, channels, height, width, kernel_h, kernel_w,
                                     pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w,
                                     out_channels, group, out_h, out_w, weight, position)
        shared[0, tid] = total
        cuda.syncthreads()
        _fold(shared, 0, 1, tid)
        if tid == 0:
            weight_diff[weight] += shared[0, 0]
        cuda.syncthreads()


def forward(im, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h,
            stride_w, dilation_h, dilation_w, weights, out_channels, group, bias, out):
    """out = the grouped convolution of ``num`` images ``im`` (+ ``bias``, or None); flat
    device arrays, ``out`` overwritten."""
    use_bias = bias is not None
    launch(_forward_kernel, out.size, im, channels, height, width, kernel_h, kernel_w, pad_h,
           pad_w, stride_h, stride_w, dilation_h, dilation_w, weights, out_channels, group,
           bias if use_bias else weights, use_bias, out)


def backward_data(out, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                  stride_h, stride_w, dilation_h, dilation_w, weights, out_channels, group, im):
    """im = the adjoint of ``forward`` applied to ``out``; ``im`` is overwritten."""
    launch(_backward_data_kernel, im.size, out, channels, height, width, kernel_h, kernel_w,
           pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w, weights, out_channels,
           group, im)


def weight_grad(im, out, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                stride_h, stride_w, dilation_h, dilation_w, out_channels, group, weight_diff):
    """weight_diff += the gradient of ``forward``'s weights for output-side gradient ``out``."""
    n_weights = weight_diff.size
    positions = out.size // max(out_channels, 1)
    if n_weights == 0 or positions == 0:
        return
    blocks, threads = _reduce_launch(n_weights, positions)
    _weight_grad_kernel[blocks, threads](n_weights, im, out, num, channels, height, width,
                                         kernel_h, kernel_w, pad_h, pad_w, stride_h, stride_w,
                                         dilation_h, dilation_w, out_channels, group,
                                         weight_diff)
