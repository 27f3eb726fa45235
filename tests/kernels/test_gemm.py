"""gemm_accumulate equals out + a @ b, through BLAS and through the numpy fallback in row
blocks (shapes above and below the block size)."""
import numpy as np
import pytest

from pycaffe_cli import blas
from pycaffe_cli.layers.kernels.cpu import gemm
from pycaffe_cli.layers.kernels.cpu.gemm import gemm_accumulate
from tests.numerics import assert_product


@pytest.mark.parametrize("through_blas", [True, False])
@pytest.mark.parametrize("rows", [1, 5, 128, 300])
@pytest.mark.parametrize("transposed", [False, True])
def test_gemm_accumulate_matches_numpy(rows, transposed, through_blas, monkeypatch):
    if not through_blas:
        monkeypatch.setattr(blas, "accumulate", lambda a, b, out: False)
    rng = np.random.default_rng(rows)
    a = rng.standard_normal((rows, 7), dtype=np.float32)
    if transposed:
        a = np.ascontiguousarray(a.T).T
    b = rng.standard_normal((7, 9), dtype=np.float32)
    out = rng.standard_normal((rows, 9), dtype=np.float32)
    start = out.copy()
    gemm_accumulate(a, b, out, block_rows=64)
    assert_product(out, a, b, addend=start)


@pytest.mark.parametrize("start", ["zeros", "values"])
@pytest.mark.parametrize("rows, depth, terms", [(50, 500, 4096), (3, 700, 512)])
def test_few_rows_accumulate_transposed(rows, depth, terms, start):
    """Weight-gradient shapes (few output channels, a long sum) take the transposed product,
    which sums in another order than one BLAS call into ``out`` (which order depends on the
    BLAS kernel): within the float32 bound of ``out + y @ col^T``, whether ``out`` starts at
    zero or not."""
    rng = np.random.default_rng(rows)
    y = rng.standard_normal((rows, terms), dtype=np.float32)
    col = rng.standard_normal((depth, terms), dtype=np.float32)
    out = np.zeros((rows, depth), np.float32) if start == "zeros" else \
        rng.standard_normal((rows, depth), dtype=np.float32)
    start_values = out.copy()
    assert gemm.transposed_pays(y, col.T, out)
    gemm_accumulate(y, col.T, out)
    assert_product(out, y, col.T, addend=start_values)


def test_the_transposed_product_is_only_for_few_rows_and_long_sums():
    a, b = np.empty((129, 600), np.float32), np.empty((300, 600), np.float32).T
    out = np.empty((129, 300), np.float32)
    assert gemm.transposed_pays(a[:128, :512], b[:512], out[:128])
    assert not gemm.transposed_pays(a, b, out)                                  # rows
    assert not gemm.transposed_pays(a[:10, :511], b[:511], out[:10])            # short sum
    assert not gemm.transposed_pays(a[:10], b[:, :10], np.empty((10, 10), np.float32))
    # an inner product's weight gradient: dy^T (a transposed view) @ x (row-major)
    assert not gemm.transposed_pays(np.empty((600, 10), np.float32).T,
                                    np.empty((600, 300), np.float32), out[:10])


def test_the_transposed_product_falls_back_without_blas(monkeypatch):
    monkeypatch.setattr(blas, "accumulate", lambda a, b, out: False)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((20, 600), dtype=np.float32)
    b = rng.standard_normal((600, 40), dtype=np.float32)
    out = rng.standard_normal((20, 40), dtype=np.float32)
    start = out.copy()
    gemm_accumulate(a, b, out)
    assert_product(out, a, b, addend=start)
