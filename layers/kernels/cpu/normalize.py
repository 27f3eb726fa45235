"""L2 normalisation kernels of SSD's Normalize layer (CPU, numba).

Arrays are viewed (N, C, S), S the spatial positions. The norm is taken either over a whole
sample (``across_spatial``: norm has shape (N, 1)) or over the channels at each position
(norm has shape (N, S)); ``eps`` is added to the sum of squares under the root:

    norm = sqrt(eps + sum x^2)
    y    = scale_c * x / norm
    dx   = (sdy - x * (sum x sdy) / norm^2) / norm, sdy = scale_c * dy   (sums over the
           norm's range; the layer passes sdy and a scale of 1)
    dscale_c += sum over n, s of dy * x / norm                 (over c too when shared)

Sums run in float64 and are rounded once to float32. A norm or dot of shape (N, 1) means
"across_spatial"; a scale of one value means "channel_shared". The parallel loops run over
(image, block of positions) jobs, so one image still uses every thread.
"""
import numpy as np
from numba import njit, prange

POSITION_BLOCK = 256  # positions per parallel job


def sums_of_products(a, b, out):
    """out (N, 1) = sum over (C, S) of a * b, or out (N, S) = sum over C of a * b."""
    _sums(a, b, 0.0, False, out)


def norms(x, eps, norm):
    """norm (N, 1) or (N, S) = sqrt(eps + sum x^2) over the norm's range, summed in float64."""
    _sums(x, x, eps, True, norm)


@njit(cache=True, parallel=True, nogil=True)
def _sums(a, b, eps, root, out):
    """out = the float64 sums of a * b over the norm's range (N, 1) or (N, S), plus eps and
    under a square root when ``root``, rounded once to float32."""
    num, channels, inner = a.shape
    if out.shape[1] == 1:
        for n in prange(num):
            total = 0.0
            for c in range(channels):
                for s in range(inner):
                    total += np.float64(a[n, c, s]) * np.float64(b[n, c, s])
            out[n, 0] = np.float32(np.sqrt(total + eps) if root else total)
        return
    blocks = (inner + POSITION_BLOCK - 1) // POSITION_BLOCK
    for job in prange(num * blocks):
        n = job // blocks
        s0 = (job % blocks) * POSITION_BLOCK
        s1 = min(s0 + POSITION_BLOCK, inner)
        totals = np.zeros(s1 - s0, np.float64)
        for c in range(channels):
            for s in range(s0, s1):
                totals[s - s0] += np.float64(a[n, c, s]) * np.float64(b[n, c, s])
        for s in range(s0, s1):
            total = totals[s - s0]
            out[n, s] = np.float32(np.sqrt(total + eps) if root else total)


@njit(cache=True, parallel=True, nogil=True)
def normalize_forward(x, norm, scale, y):
    """y = scale_c * x / norm (float32)."""
    num, channels, inner = x.shape
    per_position = norm.shape[1] != 1
    shared = scale.size == 1
    for job in prange(num * channels):
        n = job // channels
        c = job % channels
        factor = scale[0] if shared else scale[c]
        for s in range(inner):
            divisor = norm[n, s] if per_position else norm[n, 0]
            y[n, c, s] = x[n, c, s] / divisor * factor


@njit(cache=True, parallel=True, nogil=True)
def normalize_backward(x, dy, norm, dots, scale, dx):
    """dx = scale_c * (dy - x * dot / norm^2) / norm, with dot = sum x dy (from
    ``sums_of_products``) over the norm's range."""
    num, channels, inner = x.shape
    per_position = norm.shape[1] != 1
    shared = scale.size == 1
    for job in prange(num * channels):
        n = job // channels
        c = job % channels
        factor = scale[0] if shared else scale[c]
        for s in range(inner):
            k = s if per_position else 0
            value = norm[n, k]
            dx[n, c, s] = (dy[n, c, s] - x[n, c, s] * (dots[n, k] / value / value)) \
                / value * factor


@njit(cache=True, parallel=True, nogil=True)
def scale_gradient(x, dy, norm, out):
    """out (C,) or (1,) = sum over n, s (and c, for one value) of dy * x / norm, in float64
    (rounded to float32)."""
    num, channels, inner = x.shape
    per_position = norm.shape[1] != 1
    totals = np.zeros(channels, np.float64)
    for c in prange(channels):
        total = 0.0
        for n in range(num):
            for s in range(inner):
                divisor = norm[n, s] if per_position else norm[n, 0]
                total += np.float64(dy[n, c, s]) * np.float64(x[n, c, s] / divisor)
        totals[c] = total
    if out.size == 1:
        out[0] = np.float32(totals.sum())
    else:
        for c in range(channels):
            out[c] = np.float32(totals[c])
