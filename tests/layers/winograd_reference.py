"""Proven float32 error bounds of a 3x3 stride-1 convolution computed two ways, elementwise,
for the Winograd tests (derivations in layers/kernels/cpu/winograd_error.py)."""
import numpy as np

from pycaffe_cli.layers.kernels.cpu import winograd
from pycaffe_cli.layers.kernels.cpu.winograd_error import A_T, B_T, EXTRA_ROUNDINGS
from tests.layers.conv_reference import convolve
from tests.numerics import UNIT_ROUNDOFF, gamma


def _patches(x, pad):
    """|d| of every tile's 6x6 input patch: (N, C, tiles_h, tiles_w, 6, 6)."""
    num, channels, height, width = x.shape
    out_h, out_w = height + 2 * pad - 2, width + 2 * pad - 2
    tiles_h, tiles_w = winograd.tile_counts(out_h, out_w)
    padded = np.zeros((num, channels, 4 * tiles_h + 2, 4 * tiles_w + 2))
    padded[:, :, pad:pad + height, pad:pad + width] = np.abs(x)
    rows = 4 * np.arange(tiles_h)[:, None] + np.arange(6)
    cols = 4 * np.arange(tiles_w)[:, None] + np.arange(6)
    return padded[:, :, rows[:, None, :, None], cols[None, :, None, :]], (out_h, out_w)


def winograd_bound(x, weights, bias, pad):
    """gamma(C + 21) |A^T| (sum_c |U_c| * |B^T||d_c||B|) |A| + u |b| for each output."""
    channels = weights.shape[1]
    u = np.abs(winograd.transform_weights(weights).astype(np.float64))
    u = u.reshape(6, 6, *weights.shape[:2])                                  # (6, 6, M, C)
    d, (out_h, out_w) = _patches(x, pad)
    v = np.einsum("ik,nctukl,jl->nctuij", np.abs(B_T), d, np.abs(B_T), optimize=True)
    m = np.einsum("ijoc,nctuij->notuij", u, v, optimize=True)
    tiles = np.einsum("ai,notuij,bj->notuab", np.abs(A_T), m, np.abs(A_T), optimize=True)
    num, out_channels, tiles_h, tiles_w = tiles.shape[:4]
    full = tiles.transpose(0, 1, 2, 4, 3, 5).reshape(
        num, out_channels, 4 * tiles_h, 4 * tiles_w)[:, :, :out_h, :out_w]
    bound = gamma(channels + EXTRA_ROUNDINGS) * full
    if bias is not None:
        bound += UNIT_ROUNDOFF * np.abs(bias.astype(np.float64)).reshape(1, -1, 1, 1)
    return bound


def gemm_bound(x, weights, bias, pad, stride=1):
    """gamma(K + 1) (|W| |x| + |b|) for each output, K a window's terms (9 C for 3x3):
    im2col + GEMM, then the bias."""
    terms = weights[0].size + 1
    magnitude = convolve(np.abs(x), np.abs(weights.astype(np.float64)),
                         None if bias is None else np.abs(bias), (pad, pad), (stride, stride),
                         (1, 1), 1)
    return gamma(terms) * magnitude
