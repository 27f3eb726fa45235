"""Pooling on the GPU (numba.cuda): the CPU kernels' names, signatures and maths.

Arrays are device arrays of planes: ``bottom`` (P, H, W), ``top`` / ``mask`` (P, PH, PW),
P = N * C, as in ``kernels/cpu/pooling/`` (see its window.py for the window rules). One
thread per output element; every backward pass GATHERS, one thread per input pixel visiting
the windows that can hold it (``window_range``), so no kernel needs atomics:

* MAX forward: the first maximum of the window in row-major order (``>``), -FLT_MAX and
  index -1 for a window with none; the mask holds ``h * W + w`` (int32 or float32).
* MAX backward: a pixel sums the top diffs of the windows whose mask points at it.
* AVE forward: the window sum over the image divided by the window clipped to the padded
  image; backward: a pixel sums each holding window's diff / that size.
* STOCHASTIC: the CPU module's per-element bodies, compiled here for the device.

Windows are visited in row-major order, the CPU kernels' order, so the float32 sums equal
the CPU's bit for bit. MAX and AVE bodies are written here (the CPU kernels work plane by
plane); ``window_range_py`` and the STOCHASTIC bodies are imported from the CPU modules
(window.py, sto_pool.py), and the STOCHASTIC gradient body serves MAX backward too (the argmax
mask as the sampled index).
"""
import numpy as np
from numba import cuda

from pycaffe_cli.layers.kernels.cpu.pooling.sto_pool import sto_pool_grad_at_py, \
    sto_pool_test_at_py, sto_pool_test_grad_at_py, sto_pool_train_at_py
from pycaffe_cli.layers.kernels.cpu.pooling.window import FLT_MAX, window_range_py
from pycaffe_cli.cuda.device import device_function, split_index
from pycaffe_cli.cuda.launch import launch


# --- per-element bodies (plain Python: numba compiles them for either target) --------------
def max_pool_forward_at_py(bottom, top, mask, p, ph, pw, kernel_h, kernel_w, stride_h,
                           stride_w, pad_h, pad_w):
    """top, mask at (p, ph, pw): the window's first maximum and its in-plane index."""
    height, width = bottom.shape[1], bottom.shape[2]
    hstart = ph * stride_h - pad_h
    wstart = pw * stride_w - pad_w
    hend = min(hstart + kernel_h, height)
    wend = min(wstart + kernel_w, width)
    maxval = np.float32(-FLT_MAX)
    maxidx = -1
    for h in range(max(hstart, 0), hend):
        for w in range(max(wstart, 0), wend):
            if bottom[p, h, w] > maxval:
                maxval = bottom[p, h, w]
                maxidx = h * width + w
    top[p, ph, pw] = maxval
    mask[p, ph, pw] = maxidx


def ave_pool_forward_at_py(bottom, top, p, ph, pw, kernel_h, kernel_w, stride_h, stride_w,
                           pad_h, pad_w):
    """top at (p, ph, pw): the window's float32 sum / its size clipped to the padded image."""
    height, width = bottom.shape[1], bottom.shape[2]
    hstart = ph * stride_h - pad_h
    wstart = pw * stride_w - pad_w
    hend = min(hstart + kernel_h, height + pad_h)
    wend = min(wstart + kernel_w, width + pad_w)
    pool_size = (hend - hstart) * (wend - wstart)
    total = np.float32(0.0)
    for h in range(max(hstart, 0), min(hend, height)):
        for w in range(max(wstart, 0), min(wend, width)):
            total += bottom[p, h, w]
    top[p, ph, pw] = total / np.float32(pool_size)


def ave_pool_backward_at_py(top_diff, bottom_diff, p, h, w, ph0, ph1, pw0, pw1, kernel_h,
                            kernel_w, stride_h, stride_w, pad_h, pad_w):
    """bottom_diff at (p, h, w): each window [ph0, ph1) x [pw0, pw1) holding the pixel gives
    its top diff / its size clipped to the padded image."""
    height, width = bottom_diff.shape[1], bottom_diff.shape[2]
    gradient = np.float32(0.0)
    for ph in range(ph0, ph1):
        hstart = ph * stride_h - pad_h
        rows = min(hstart + kernel_h, height + pad_h) - hstart
        for pw in range(pw0, pw1):
            wstart = pw * stride_w - pad_w
            cols = min(wstart + kernel_w, width + pad_w) - wstart
            gradient += top_diff[p, ph, pw] / np.float32(rows * cols)
    bottom_diff[p, h, w] = gradient


_window_range = device_function(window_range_py)
_max_pool_forward_at = device_function(max_pool_forward_at_py)
_ave_pool_forward_at = device_function(ave_pool_forward_at_py)
_ave_pool_backward_at = device_function(ave_pool_backward_at_py)
# a max-pool gradient is the stochastic one with the argmax mask for the sampled index
_route_grad_at = device_function(sto_pool_grad_at_py)
_sto_pool_train_at = device_function(sto_pool_train_at_py)
_sto_pool_test_at = device_function(sto_pool_test_at_py)
_sto_pool_test_grad_at = device_function(sto_pool_test_grad_at_py)


# --- kernels: one thread per element of the array being written ---------------------------
@cuda.jit(cache=True)
def _max_pool_forward_kernel(n, bottom, top, mask, kernel_h, kernel_w, stride_h, stride_w,
                             pad_h, pad_w):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        p, ph, pw = split_index(index, top.shape[1], top.shape[2])
        _max_pool_forward_at(bottom, top, mask, p, ph, pw, kernel_h, kernel_w, stride_h,
                             stride_w, pad_h, pad_w)


@cuda.jit(cache=True)
def _route_backward_kernel(n, top_diff, index_map, bottom_diff, kernel_h, kernel_w, stride_h,
                           stride_w, pad_h, pad_w):
    pooled_h, pooled_w = top_diff.shape[1], top_diff.shape[2]
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        p, h, w = split_index(index, bottom_diff.shape[1], bottom_diff.shape[2])
        ph0, ph1 = _window_range(h + pad_h, kernel_h, stride_h, pooled_h)
        pw0, pw1 = _window_range(w + pad_w, kernel_w, stride_w, pooled_w)
        _route_grad_at(top_diff, index_map, bottom_diff, p, h, w, ph0, ph1, pw0, pw1)


@cuda.jit(cache=True)
def _ave_pool_forward_kernel(n, bottom, top, kernel_h, kernel_w, stride_h, stride_w, pad_h,
                             pad_w):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        p, ph, pw = split_index(index, top.shape[1], top.shape[2])
        _ave_pool_forward_at(bottom, top, p, ph, pw, kernel_h, kernel_w, stride_h, stride_w,
                             pad_h, pad_w)


@cuda.jit(cache=True)
def _ave_pool_backward_kernel(n, top_diff, bottom_diff, kernel_h, kernel_w, stride_h,
                              stride_w, pad_h, pad_w):
    pooled_h, pooled_w = top_diff.shape[1], top_diff.shape[2]
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        p, h, w = split_index(index, bottom_diff.shape[1], bottom_diff.shape[2])
        ph0, ph1 = _window_range(h + pad_h, kernel_h, stride_h, pooled_h)
        pw0, pw1 = _window_range(w + pad_w, kernel_w, stride_w, pooled_w)
        _ave_pool_backward_at(top_diff, bottom_diff, p, h, w, ph0, ph1, pw0, pw1, kernel_h,
                              kernel_w, stride_h, stride_w, pad_h, pad_w)


@cuda.jit(cache=True)
def _sto_pool_train_kernel(n, bottom, uniform, top, rand_idx, kernel_h, kernel_w, stride_h,
                           stride_w):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        p, ph, pw = split_index(index, top.shape[1], top.shape[2])
        _sto_pool_train_at(bottom, uniform, top, rand_idx, p, ph, pw, kernel_h, kernel_w,
                           stride_h, stride_w)


@cuda.jit(cache=True)
def _sto_pool_test_kernel(n, bottom, top, window_sum, kernel_h, kernel_w, stride_h, stride_w):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        p, ph, pw = split_index(index, top.shape[1], top.shape[2])
        _sto_pool_test_at(bottom, top, window_sum, p, ph, pw, kernel_h, kernel_w, stride_h,
                          stride_w)


@cuda.jit(cache=True)
def _sto_pool_test_grad_kernel(n, bottom, top, window_sum, top_diff, bottom_diff, kernel_h,
                               kernel_w, stride_h, stride_w):
    pooled_h, pooled_w = top_diff.shape[1], top_diff.shape[2]
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        p, h, w = split_index(index, bottom_diff.shape[1], bottom_diff.shape[2])
        ph0, ph1 = _window_range(h, kernel_h, stride_h, pooled_h)
        pw0, pw1 = _window_range(w, kernel_w, stride_w, pooled_w)
        _sto_pool_test_grad_at(bottom, top, window_sum, top_diff, bottom_diff, p, h, w, ph0,
                               ph1, pw0, pw1)


# --- host entry points: the CPU module's names and signatures ------------------------------
def max_pool_forward(bottom, top, mask, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w):
    """Max pooling of ``bottom`` (P, H, W) into ``top`` and ``mask`` (P, PH, PW)."""
    launch(_max_pool_forward_kernel, top.size, bottom, top, mask, kernel_h, kernel_w,
           stride_h, stride_w, pad_h, pad_w)


def max_pool_backward(top_diff, mask, bottom_diff, kernel_h, kernel_w, stride_h, stride_w,
                      pad_h, pad_w):
    """Each input pixel sums the top diffs of the windows whose argmax it is; writes every
    element of ``bottom_diff``."""
    launch(_route_backward_kernel, bottom_diff.size, top_diff, mask, bottom_diff, kernel_h,
           kernel_w, stride_h, stride_w, pad_h, pad_w)


def ave_pool_forward(bottom, top, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w):
    """Average pooling of ``bottom`` (P, H, W) into ``top`` (P, PH, PW)."""
    launch(_ave_pool_forward_kernel, top.size, bottom, top, kernel_h, kernel_w, stride_h,
           stride_w, pad_h, pad_w)


def ave_pool_backward(top_diff, bottom_diff, kernel_h, kernel_w, stride_h, stride_w, pad_h,
                      pad_w):
    """Each input pixel gathers its windows' evenly spread diffs; writes all of
    ``bottom_diff``."""
    launch(_ave_pool_backward_kernel, bottom_diff.size, top_diff, bottom_diff, kernel_h,
           kernel_w, stride_h, stride_w, pad_h, pad_w)


def sto_pool_forward_train(bottom, uniform, top, rand_idx, kernel_h, kernel_w, stride_h,
                           stride_w):
    """Stochastic pooling, TRAIN: sampled activations into ``top``, their indices into
    ``rand_idx`` (int32), from ``uniform`` draws in (0, 1], all of shape (P, PH, PW)."""
    launch(_sto_pool_train_kernel, top.size, bottom, uniform, top, rand_idx, kernel_h,
           kernel_w, stride_h, stride_w)


def sto_pool_forward_test(bottom, top, window_sum, kernel_h, kernel_w, stride_h, stride_w):
    """Stochastic pooling, TEST: the activation-weighted average (``window_sum`` keeps the
    denominators for the backward pass)."""
    launch(_sto_pool_test_kernel, top.size, bottom, top, window_sum, kernel_h, kernel_w,
           stride_h, stride_w)


def sto_pool_backward(top_diff, rand_idx, bottom_diff, kernel_h, kernel_w, stride_h,
                      stride_w):
    """Route each top diff to its sampled position (a gather per input pixel)."""
    launch(_route_backward_kernel, bottom_diff.size, top_diff, rand_idx, bottom_diff,
           kernel_h, kernel_w, stride_h, stride_w, 0, 0)


def sto_pool_backward_test(bottom, top, window_sum, top_diff, bottom_diff, kernel_h, kernel_w,
                           stride_h, stride_w):
    """Gradient of the TEST-phase weighted average (Caffe has no TEST backward)."""
    launch(_sto_pool_test_grad_kernel, bottom_diff.size, bottom, top, window_sum, top_diff,
           bottom_diff, kernel_h, kernel_w, stride_h, stride_w)
