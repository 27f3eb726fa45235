"""Per-channel affine maps in one pass (CPU, numba), over arrays viewed as (outer, channels,
inner): Scale's forward ``y = x s[c] (+ b[c])`` (in place while training, with the copy of
x its backward needs), then, for the inference plan, a ReLU; and BatchNorm's forward with
global statistics ``y = (x - mean[c]) / std[c]``, and its backward then, ``dy (1 / std[c])``.

Scale layers run this way (layers/scale.py), among them the inference plan's ones that
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
def _rows(x, a, b, has_b, y, slope, rectified, normalizing, saved, channels, inner, first,
          last):
    """Rows [first, last) of the (outer x channels) rows of ``inner`` values; x copied to
    ``saved`` first unless that is None (numba compiles that case apart, without the
    branch: a flag tested in the loop slowed the inference plan's calls by 10-25%)."""
    for row in range(first, last):
        channel = row % channels
        a_c = a[channel]
        b_c = b[channel] if has_b else float32(0)
        start = row * inner
        for i in range(start, start + inner):
            at = uintp(i)
            if saved is not None:
                saved[at] = x[at]
            if normalizing:
                value = (x[at] - b_c) / a_c
            else:
                value = x[at] * a_c
                if has_b:
                    value = value + b_c
            y[at] = rectify(value, slope) if rectified else value


@njit(cache=True, parallel=True, nogil=True)
def _by_rows(x, a, b, has_b, y, slope, rectified, normalizing, saved, channels, inner):
    """Both maps, one compiled kernel: ``(x - b) / a`` where ``normalizing``, else
    ``x a (+ b)``; then the ReLU where ``rectified``."""
    n = y.size
    if n == 0:
        return
    rows = n // inner
    if n < PARALLEL_MIN:
        _rows(x, a, b, has_b, y, slope, rectified, normalizing, saved, channels, inner, 0,
              rows)
        return
    per_block = max(1, BLOCK // inner)
    for block in prange((rows + per_block - 1) // per_block):
        first = block * per_block
        _rows(x, a, b, has_b, y, slope, rectified, normalizing, saved, channels, inner,
              first, min(first + per_block, rows))


def forward(x, scale, bias, has_bias, y, slope, rectified, channels, inner, saved=None):
    """y = x * scale[c] (+ bias[c] where ``has_bias``), then ReLU with float32 negative
    ``slope`` where ``rectified``; c is the index along the middle axis of (outer,
    ``channels``, ``inner``). With ``saved`` (as large as x) x is copied there in the same
    pass: Scale in place keeps its bottom for backward so."""
    _by_rows(x, scale, bias, has_bias, y, slope, rectified, False, saved, channels, inner)


def normalize(x, mean, std, y, channels, inner):
    """y = (x - mean[c]) / std[c] over (outer, ``channels``, ``inner``): BatchNorm's forward
    with global statistics (layers/batch_norm.py), in its numpy code's order, in one pass."""
    _by_rows(x, std, mean, True, y, float32(0), False, True, None, channels, inner)
