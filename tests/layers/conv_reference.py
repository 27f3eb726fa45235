"""Naive numpy (de)convolution: explicit window sums, for the convolution layer tests."""
import itertools

import numpy as np


def conv_out(shape, kernel, pad, stride, dilation):
    return tuple((s + 2 * p - d * (k - 1) - 1) // st + 1
                 for s, k, p, st, d in zip(shape, kernel, pad, stride, dilation))


def _window(position, kernel, stride, dilation):
    return tuple(slice(o * s, o * s + d * (k - 1) + 1, d)
                 for o, k, s, d in zip(position, kernel, stride, dilation))


def convolve(x, weight, bias, pad, stride, dilation, group):
    """x (N, C, *S), weight (M, C / G, *k): top[n, m, o] = b[m] + sum of W x over the window."""
    kernel = weight.shape[2:]
    axes = len(kernel)
    n, c = x.shape[:2]
    m = weight.shape[0]
    out = conv_out(x.shape[2:], kernel, pad, stride, dilation)
    padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(p, p) for p in pad])
    top = np.zeros((n, m) + out)
    cg, mg = c // group, m // group
    sum_axes = tuple(range(1, 2 + axes))
    for position in np.ndindex(*out):
        patch = padded[(slice(None), slice(None)) + _window(position, kernel, stride, dilation)]
        for g in range(group):
            top[(slice(None), slice(g * mg, (g + 1) * mg)) + position] = np.tensordot(
                patch[:, g * cg:(g + 1) * cg], weight[g * mg:(g + 1) * mg], (sum_axes, sum_axes))
    if bias is not None:
        top += bias.reshape((1, m) + (1,) * axes)
    return top


def deconvolve(x, weight, bias, pad, stride, dilation, group):
    """x (N, C, *S), weight (C, M / G, *k): each input element scatters W-weighted copies
    of itself into its window of the (cropped) output."""
    kernel = weight.shape[2:]
    axes = len(kernel)
    n, c = x.shape[:2]
    m = weight.shape[1] * group
    full = tuple(s * (i - 1) + d * (k - 1) + 1
                 for i, k, s, d in zip(x.shape[2:], kernel, stride, dilation))
    top = np.zeros((n, m) + full)
    cg, mg = c // group, m // group
    for position in np.ndindex(*x.shape[2:]):
        window = _window(position, kernel, stride, dilation)
        for g in range(group):
            values = x[(slice(None), slice(g * cg, (g + 1) * cg)) + position].astype(np.float64)
            top[(slice(None), slice(g * mg, (g + 1) * mg)) + window] += np.tensordot(
                values, weight[g * cg:(g + 1) * cg], (1, 0))
    crop = tuple(slice(p, f - p) for p, f in zip(pad, full))
    top = top[(slice(None), slice(None)) + crop]
    if bias is not None:
        top += bias.reshape((1, m) + (1,) * axes)
    return top


# The 2-d parameter product shared by the Convolution and Deconvolution tests.
KERNELS = {"k1": ("kernel_size: 1", (1, 1)), "k3": ("kernel_size: 3", (3, 3)),
           "k3x2": ("kernel_h: 3 kernel_w: 2", (3, 2))}
CASES_2D = list(itertools.product(KERNELS, [0, 1], [1, 2], [1, 2], [1, 2], [True, False]))


def case_params(kernel, pad, stride, dilation, group, bias, num_output):
    """(convolution_param text, kernel shape) for one CASES_2D entry."""
    text = (f"{KERNELS[kernel][0]} pad: {pad} stride: {stride} dilation: {dilation} "
            f"group: {group} num_output: {num_output} bias_term: {str(bias).lower()}")
    return text, KERNELS[kernel][1]
