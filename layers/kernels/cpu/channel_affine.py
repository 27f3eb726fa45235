"""Per-channel affine maps in one pass (CPU, numba), over arrays viewed as (outer, channels,
inner): Scale's forward-only pass ``y = x s[c] (+ b[c])``, then, for the inference plan, a
ReLU; and BatchNorm's forward with global statistics ``y = (x - mean[c]) / std[c]``.

The inference plan runs Scale layers this way (layers/scale.py), among them the ones that
BatchNorm, Scale and Bias layers with no producer before them fold into
(pycaffe_cli/inference/fold.py). The arithmetic is each layer's numpy code's, in its order
(Scale: a float32 product, then the bias added; BatchNorm: the difference, then the
quotient), so the bits are the same; ``y`` may be ``x`` (in place). Arrays are flat (1-d)
C-contiguous.
"""
from numba import float32, njit, prange, uintp

from pycaffe_cli.layers.kernels.cpu.layout import rectify

# About how many elements a thread takes at a time (whole rows of ``inner`` values), and the
# fewest elements worth waking the threads for (as Eltwise's kernel,
# layers/kernels/cpu/eltwise.py).
BLOCK = 1 << 14
PARALLEL_MIN = 1 << 17


@njit(cache=True, inline="always")
def _rows(x, scale, bias, has_bias, y, slope, rectified, channels, inner, first, last):
    """Rows [first, last) of the (outer x channels) rows of ``inner`` values."""
    for row in range(first, last):
        channel = row % channels
        s = scale[channel]
        b = bias[channel] if has_bias else float32(0)
        start = row * inner
        for i in range(start, start + inner):
            at = uintp(i)
            value = x[at] * s
            if has_bias:
                value = value + b
            y[at] = rectify(value, slope) if rectified else value


@njit(cache=True, parallel=True, nogil=True)
def forward(x, scale, bias, has_bias, y, slope, rectified, channels, inner):
    """y = x * scale[c] (+ bias[c] where ``has_bias``), then ReLU with float32 negative
    ``slope`` where ``rectified``; c is the index along the middle axis of (outer,
    ``channels``, ``inner``)."""
    n = y.size
    if n == 0:
        return
    rows = n // inner
    if n < PARALLEL_MIN:
        _rows(x, scale, bias, has_bias, y, slope, rectified, channels, inner, 0, rows)
        return
    per_block = max(1, BLOCK // inner)
    for block in prange((rows + per_block - 1) // per_block):
        first = block * per_block
        _rows(x, scale, bias, has_bias, y, slope, rectified, channels, inner, first,
              min(first + per_block, rows))


@njit(cache=True, inline="always")
def _normalized_rows(x, mean, std, y, channels, inner, first, last):
    for row in range(first, last):
        channel = row % channels
        m, s = mean[channel], std[channel]
        start = row * inner
        for i in range(start, start + inner):
            at = uintp(i)
            y[at] = (x[at] - m) / s


@njit(cache=True, parallel=True, nogil=True)
def normalize(x, mean, std, y, channels, inner):
    """y = (x - mean[c]) / std[c] over (outer, ``channels``, ``inner``): BatchNorm's forward
    with global statistics (layers/batch_norm.py), in its numpy code's order, in one pass."""
    n = y.size
    if n == 0:
        return
    rows = n // inner
    if n < PARALLEL_MIN:
        _normalized_rows(x, mean, std, y, channels, inner, 0, rows)
        return
    per_block = max(1, BLOCK // inner)
    for block in prange((rows + per_block - 1) // per_block):
        first = block * per_block
        _normalized_rows(x, mean, std, y, channels, inner, first,
                         min(first + per_block, rows))
