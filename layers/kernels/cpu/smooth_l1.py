"""Smooth L1 loss kernels (Fast R-CNN's SmoothL1LossLayer maths), float32 element by element.

With s2 = sigma^2, d = w_in * (pred - target) (w_in = 1 without inside weights) and

    f(d)  = 0.5 * s2 * d^2  if |d| < 1 / s2,   |d| - 0.5 / s2  otherwise
    f'(d) = s2 * d          if |d| < 1 / s2,   sign(d)         otherwise

the forward pass keeps d (``diff``) and writes errors = w_out * f(d); the backward pass
writes alpha * f'(d), times w_in * w_out when ``weighted`` (Fast R-CNN's four-bottom form).
The per-element bodies (``*_py``) also run on the GPU (kernels/cuda/smooth_l1.py). The CPU
loops are serial: box-regression blobs hold thousands to a few hundred thousand values, too
few for threads to pay. The fork computes f in double before storing floats; here it is
float32 throughout (a difference of at most one rounding per element).
"""
import numpy as np
from numba import njit


def smooth_l1_forward_at_py(pred, target, inside, outside, has_inside, has_outside, sigma2,
                            diff, errors, i):
    """diff[i] = w_in (pred - target), errors[i] = w_out f(diff[i])."""
    d = pred[i] - target[i]
    if has_inside:
        d = d * inside[i]
    diff[i] = d
    magnitude = abs(d)
    if magnitude < np.float32(1.0) / sigma2:
        error = np.float32(0.5) * d * d * sigma2
    else:
        error = magnitude - np.float32(0.5) / sigma2
    if has_outside:
        error = error * outside[i]
    errors[i] = error


def smooth_l1_backward_at_py(diff, inside, outside, weighted, sigma2, alpha, out, i):
    """out[i] = alpha f'(diff[i]) (times w_in w_out when ``weighted``)."""
    d = diff[i]
    if abs(d) < np.float32(1.0) / sigma2:
        slope = sigma2 * d
    elif d > 0:
        slope = np.float32(1.0)
    else:
        slope = np.float32(-1.0)
    grad = alpha * slope
    if weighted:
        grad = grad * inside[i] * outside[i]
    out[i] = grad


_forward_at = njit(cache=True, inline="always")(smooth_l1_forward_at_py)
_backward_at = njit(cache=True, inline="always")(smooth_l1_backward_at_py)


@njit(cache=True)
def smooth_l1_forward(pred, target, inside, outside, has_inside, has_outside, sigma2, diff,
                      errors):
    """Flat float32 arrays; ``inside`` / ``outside`` are read only when their flag is set."""
    for i in range(pred.size):
        _forward_at(pred, target, inside, outside, has_inside, has_outside, sigma2, diff,
                    errors, i)


@njit(cache=True)
def smooth_l1_backward(diff, inside, outside, weighted, sigma2, alpha, out):
    """Flat float32 arrays; alpha is float32."""
    for i in range(diff.size):
        _backward_at(diff, inside, outside, weighted, sigma2, alpha, out, i)
