"""STOCHASTIC pooling kernels (Caffe's PoolingLayer STOCHASTIC) over planes of shape
(N*C, H, W) (CPU, numba; no padding).

TRAIN samples one position of each window with probability proportional to its activation
(the uniform draws come from the layer); TEST takes the activation-weighted average. Each
kernel is a plain Python function ``*_at_py`` per output element (forward) or per input
element (backward), run under a ``prange`` over the planes (inlined at numba-IR level with
``inline="always"``: as plain calls they ran slower, docs/kernel-choices.md, "Stochastic
pooling"); the CUDA twin
(kernels/cuda/pooling.py) compiles the same bodies. The backward passes GATHER: an input pixel
visits the output windows that can contain it (window.py's ``window_ranges``).
"""
import numpy as np
from numba import njit, prange

from pycaffe_cli.layers.kernels.cpu.pooling.window import FLT_MIN, window_ranges


# --- per-element bodies (plain Python: numba compiles them for either target) --------------
def sto_pool_train_at_py(bottom, uniform, top, rand_idx, p, ph, pw, kernel_h, kernel_w,
                         stride_h, stride_w):
    """Sample a window position with probability proportional to its activation.

    With u = uniform[p, ph, pw] in (0, 1] and S the window sum, the first position whose
    running sum reaches u * S is taken (pooling_layer.cu's StoPoolForwardTrain).
    """
    height, width = bottom.shape[1], bottom.shape[2]
    hstart = ph * stride_h
    wstart = pw * stride_w
    hend = min(hstart + kernel_h, height)
    wend = min(wstart + kernel_w, width)
    cumsum = np.float32(0.0)
    for h in range(hstart, hend):
        for w in range(wstart, wend):
            cumsum += bottom[p, h, w]
    threshold = uniform[p, ph, pw] * cumsum
    top[p, ph, pw] = 0.0
    rand_idx[p, ph, pw] = -1
    cumsum = np.float32(0.0)
    for h in range(hstart, hend):
        for w in range(wstart, wend):
            cumsum += bottom[p, h, w]
            if cumsum >= threshold:
                top[p, ph, pw] = bottom[p, h, w]
                rand_idx[p, ph, pw] = h * width + w
                return


def sto_pool_test_at_py(bottom, top, window_sum, p, ph, pw, kernel_h, kernel_w, stride_h,
                        stride_w):
    """top = sum(x^2) / (FLT_MIN + sum(x)) over the window (activation-weighted average)."""
    height = bottom.shape[1]
    width = bottom.shape[2]
    hstart = ph * stride_h
    wstart = pw * stride_w
    hend = min(hstart + kernel_h, height)
    wend = min(wstart + kernel_w, width)
    cumsum = np.float32(FLT_MIN)
    cumvalues = np.float32(0.0)
    for h in range(hstart, hend):
        for w in range(wstart, wend):
            cumsum += bottom[p, h, w]
            cumvalues += bottom[p, h, w] * bottom[p, h, w]
    top[p, ph, pw] = cumvalues / cumsum
    window_sum[p, ph, pw] = cumsum


def sto_pool_grad_at_py(top_diff, rand_idx, bottom_diff, p, h, w, ph0, ph1, pw0, pw1):
    """bottom_diff[p, h, w] = sum of top diffs of the windows [ph0, ph1) x [pw0, pw1) holding
    (h, w) that sampled it."""
    width = bottom_diff.shape[2]
    index = h * width + w
    gradient = np.float32(0.0)
    for ph in range(ph0, ph1):
        for pw in range(pw0, pw1):
            if rand_idx[p, ph, pw] == index:
                gradient += top_diff[p, ph, pw]
    bottom_diff[p, h, w] = gradient


def sto_pool_test_grad_at_py(bottom, top, window_sum, top_diff, bottom_diff, p, h, w, ph0,
                             ph1, pw0, pw1):
    """Exact gradient of the TEST output y = S2 / S1: dy/dx = (2 x - y) / S1, summed over the
    windows [ph0, ph1) x [pw0, pw1) holding (h, w)."""
    x2 = np.float32(2.0) * bottom[p, h, w]
    gradient = np.float32(0.0)
    for ph in range(ph0, ph1):
        for pw in range(pw0, pw1):
            gradient += top_diff[p, ph, pw] * (x2 - top[p, ph, pw]) / window_sum[p, ph, pw]
    bottom_diff[p, h, w] = gradient


_sto_pool_train_at = njit(cache=True, inline="always")(sto_pool_train_at_py)
_sto_pool_test_at = njit(cache=True, inline="always")(sto_pool_test_at_py)
_sto_pool_grad_at = njit(cache=True, inline="always")(sto_pool_grad_at_py)
_sto_pool_test_grad_at = njit(cache=True, inline="always")(sto_pool_test_grad_at_py)


@njit(cache=True, parallel=True, nogil=True)
def sto_pool_forward_train(bottom, uniform, top, rand_idx, kernel_h, kernel_w, stride_h,
                           stride_w):
    """Stochastic pooling, TRAIN: sampled activations into ``top``, their indices into
    ``rand_idx`` (int32), from ``uniform`` draws in (0, 1], all of shape (P, PH, PW)."""
    for p in prange(top.shape[0]):
        for ph in range(top.shape[1]):
            for pw in range(top.shape[2]):
                _sto_pool_train_at(bottom, uniform, top, rand_idx, p, ph, pw, kernel_h,
                                   kernel_w, stride_h, stride_w)


@njit(cache=True, parallel=True, nogil=True)
def sto_pool_forward_test(bottom, top, window_sum, kernel_h, kernel_w, stride_h, stride_w):
    """Stochastic pooling, TEST: the activation-weighted average; ``window_sum`` keeps the
    denominators for the backward pass."""
    for p in prange(top.shape[0]):
        for ph in range(top.shape[1]):
            for pw in range(top.shape[2]):
                _sto_pool_test_at(bottom, top, window_sum, p, ph, pw, kernel_h, kernel_w,
                                  stride_h, stride_w)


@njit(cache=True, parallel=True, nogil=True)
def sto_pool_backward(top_diff, rand_idx, bottom_diff, kernel_h, kernel_w, stride_h,
                      stride_w):
    """Route each top diff to its sampled position; writes every element of ``bottom_diff``."""
    rows, cols = window_ranges(bottom_diff, top_diff, kernel_h, kernel_w, stride_h, stride_w,
                               0, 0)
    for p in prange(bottom_diff.shape[0]):
        for h in range(bottom_diff.shape[1]):
            for w in range(bottom_diff.shape[2]):
                _sto_pool_grad_at(top_diff, rand_idx, bottom_diff, p, h, w, rows[h, 0],
                                  rows[h, 1], cols[w, 0], cols[w, 1])


@njit(cache=True, parallel=True, nogil=True)
def sto_pool_backward_test(bottom, top, window_sum, top_diff, bottom_diff, kernel_h, kernel_w,
                           stride_h, stride_w):
    """Gradient of the TEST-phase weighted average (Caffe has no TEST backward)."""
    rows, cols = window_ranges(bottom_diff, top_diff, kernel_h, kernel_w, stride_h, stride_w,
                               0, 0)
    for p in prange(bottom_diff.shape[0]):
        for h in range(bottom_diff.shape[1]):
            for w in range(bottom_diff.shape[2]):
                _sto_pool_test_grad_at(bottom, top, window_sum, top_diff, bottom_diff, p, h, w,
                                       rows[h, 0], rows[h, 1], cols[w, 0], cols[w, 1])
