"""The Eltwise layer's element loop (CPU, numba): same-shaped bottoms combined into one top,
and, for the inference plan, a ReLU on the result in the same pass; ``sum_scaled`` for the
gradients of Split (the tops' diffs summed) and of Eltwise SUM (a coefficient times the top's
diff).

Each element is computed from all the bottoms' values at its index before it is written, so
the top may be any of the bottoms (in place). The arithmetic is the numpy code's of
layers/eltwise.py, in its order, so the bits are the same:

* SUM:  ``(0 + c0 x0) + c1 x1 (+ c2 x2 ...)`` in float32 (a coefficient of 1 multiplies
  exactly; the leading ``0 +`` turns -0 into +0, as numpy's zero-filled accumulator does);
* PROD: ``(x0 x1) x2 ...``;
* MAX:  ``x0 if x0 > x1 else x1``, then a later bottom only where it is strictly larger (so
  a NaN in bottom 0 gives bottom 1's value, as ``np.where(x0 > x1, x0, x1)`` does).

Arrays are flat (1-d) C-contiguous; the bottoms come as a tuple of such arrays.
"""
from numba import float32, njit, prange, uintp

from pycaffe_cli.layers.kernels.cpu.layout import rectify

# caffe.proto's EltwiseParameter.EltwiseOp values.
PROD, SUM, MAX = 0, 1, 2
# Runs of elements a thread takes at a time, and the fewest elements worth waking the
# threads for (as ReLU's kernels, layers/relu.py).
BLOCK = 1 << 14
PARALLEL_MIN = 1 << 17


@njit(cache=True, inline="always")
def _first_pair(op, x, cx, y, cy):
    if op == SUM:
        return (float32(0) + x * cx) + y * cy
    if op == PROD:
        return x * y
    return x if x > y else y


@njit(cache=True, inline="always")
def _with_next(op, value, z, cz):
    if op == SUM:
        return value + z * cz
    if op == PROD:
        return value * z
    return z if z > value else value


@njit(cache=True, inline="always")
def _block(op, bottoms, coeffs, top, slope, rectified, start, stop):
    first, second = bottoms[0], bottoms[1]
    c0, c1 = coeffs[0], coeffs[1]
    for i in range(start, stop):
        at = uintp(i)
        value = _first_pair(op, first[at], c0, second[at], c1)
        for k in range(2, len(bottoms)):
            value = _with_next(op, value, bottoms[k][at], coeffs[k])
        top[at] = rectify(value, slope) if rectified else value


@njit(cache=True, parallel=True, nogil=True)
def combine(op, bottoms, coeffs, top, slope, rectified):
    """top = the bottoms combined by ``op`` (SUM with float32 ``coeffs``, PROD, MAX), then
    ReLU with float32 negative ``slope`` where ``rectified``."""
    n = top.size
    blocks = (n + BLOCK - 1) // BLOCK
    if n < PARALLEL_MIN:
        _block(op, bottoms, coeffs, top, slope, rectified, 0, n)
    else:
        for block in prange(blocks):
            start = block * BLOCK
            _block(op, bottoms, coeffs, top, slope, rectified, start, min(start + BLOCK, n))


@njit(cache=True, inline="always")
def _sum_block(sources, scale, out, start, stop):
    first = sources[0]
    for i in range(start, stop):
        at = uintp(i)
        value = first[at]
        for k in range(1, len(sources)):
            value = value + sources[k][at]
        out[at] = value if scale == 1 else scale * value


@njit(cache=True, parallel=True, nogil=True)
def sum_scaled(sources, scale, out):
    """out = scale * ((s0 + s1) + s2 ...) in float32, the product skipped for a scale of 1:
    the bits of numpy's ``np.add`` chain (Split's backward, Caffe's order) and of
    ``np.float32(c) * dy`` for one source (Eltwise SUM's backward). ``out`` may be a
    source."""
    n = out.size
    if n < PARALLEL_MIN:
        _sum_block(sources, scale, out, 0, n)
        return
    for block in prange((n + BLOCK - 1) // BLOCK):
        start = block * BLOCK
        _sum_block(sources, scale, out, start, min(start + BLOCK, n))
