"""gemm_accumulate equals out + a @ b, through BLAS and through the numpy fallback in row
blocks (shapes above and below the block size)."""
import numpy as np
import pytest

from pycaffe_cli import blas
from pycaffe_cli.layers.kernels.cpu.gemm import gemm_accumulate


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
    expected = out + a @ b
    gemm_accumulate(a, b, out, block_rows=64)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
