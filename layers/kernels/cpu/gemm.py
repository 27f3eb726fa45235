"""GEMM with accumulation, which numpy's matmul lacks (BLAS's beta = 1).

Caffe accumulates parameter gradients with ``C = A B + C``. Where numpy's OpenBLAS can be
called directly that is one BLAS call (``pycaffe_cli.blas.accumulate``). Otherwise ``C += A @
B`` in numpy would first write the whole product to a temporary and then read it back, which
on a large weight gradient costs more than the product itself (docs/kernel-choices.md,
"Accumulating GEMMs"), so the fallback computes it in row blocks that keep each block's
temporary in cache.
"""
import numpy as np

from pycaffe_cli import blas

BLOCK_ROWS = 128
# Products with few rows out of a long sum (convolution weight gradients: output channels x
# window, summed over the positions) run faster with the result transposed: OpenBLAS takes
# the short side as the rows of its column-major output then. More rows lose, and short sums
# gain nothing (docs/kernel-choices.md, "Transposed weight gradients"). The same dot
# products; a BLAS kernel may sum them in another order either way round.
TRANSPOSED_MAX_ROWS = 128
TRANSPOSED_MIN_TERMS = 512


def gemm_accumulate(a, b, out, block_rows=BLOCK_ROWS):
    """``out += a @ b`` for 2-d float32 arrays."""
    if transposed_pays(a, b, out) and _accumulate_transposed(a, b, out):
        return
    if not blas.accumulate(a, b, out):
        accumulate_in_blocks(a, b, out, block_rows)


def transposed_pays(a, b, out):
    """Whether ``gemm_accumulate`` computes ``out += a @ b`` transposed (see above): few
    rows, a long sum, and the operands laid out as a convolution's are (``a``'s rows and
    ``b``'s columns contiguous). An inner product's weight gradient (dy^T, a transposed
    view, times x) ran slower transposed."""
    rows, cols = out.shape
    return (rows <= TRANSPOSED_MAX_ROWS and cols > rows and a.shape[1] >= TRANSPOSED_MIN_TERMS
            and a.strides[1] == a.itemsize and b.strides[0] == b.itemsize)


def _accumulate_transposed(a, b, out):
    """``out += a @ b`` as out^T += b^T @ a^T in a scratch copy of out^T; False (``out``
    untouched) where BLAS cannot be called."""
    scratch = np.ascontiguousarray(out.T)
    if not blas.accumulate(b.T, a.T, scratch):
        return False
    out[...] = scratch.T
    return True


def accumulate_in_blocks(a, b, out, block_rows=BLOCK_ROWS):
    """``out += a @ b`` in numpy, one block of ``out``'s rows at a time."""
    rows = out.shape[0]
    if rows <= block_rows:
        out += a @ b
        return
    scratch = np.empty((block_rows, out.shape[1]), dtype=out.dtype)
    for start in range(0, rows, block_rows):
        stop = min(start + block_rows, rows)
        block = scratch[:stop - start]
        np.matmul(a[start:stop], b, out=block)
        out[start:stop] += block
