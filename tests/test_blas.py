"""matmul_spread: a batch of GEMMs one per thread, with OpenBLAS's thread count put back."""
import numpy as np
import pytest

from pycaffe_cli import blas


@pytest.fixture(autouse=True)
def spread_everything(monkeypatch):
    """These operands are small: spread them anyway (see test_small_batches_are_not_spread)."""
    monkeypatch.setattr(blas, "SPREAD_MIN_FLOPS", 0)


def operands(batch=36, rows=24, depth=16, cols=40, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((batch, rows, depth)).astype(np.float32)
    b = rng.standard_normal((batch, depth, cols)).astype(np.float32)
    return a, b, np.full((batch, rows, cols), np.nan, np.float32)


def thread_count():
    controls = blas._thread_controls()
    return controls[1]() if controls is not None else 1


def test_the_products_and_the_thread_count_after():
    a, b, out = operands()
    before = thread_count()
    blas.matmul_spread(a, b, out)
    assert thread_count() == before
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_numpy_openblas_is_found_here():
    """numpy's wheels bundle OpenBLAS (the README's set-up installs them)."""
    assert blas._thread_controls() is not None


@pytest.mark.parametrize("batch", [1, 2, 3])
def test_batches_smaller_than_the_threads(batch):
    a, b, out = operands(batch=batch)
    blas.matmul_spread(a, b, out)
    np.testing.assert_array_equal(out, np.matmul(a, b))


def test_an_error_in_a_product_restores_the_thread_count():
    a, b, out = operands()
    before = thread_count()
    with pytest.raises(ValueError):
        blas.matmul_spread(a, b[:, :-1], out)  # depths differ
    assert thread_count() == before


def test_without_openblas_controls_it_is_numpy_matmul(monkeypatch):
    monkeypatch.setattr(blas, "_thread_controls", lambda: None)
    a, b, out = operands()
    blas.matmul_spread(a, b, out)
    np.testing.assert_array_equal(out, np.matmul(a, b))


def test_only_numpy_own_openblas_is_used():
    """Other wheels bundle OpenBLAS too (OpenCV's does): the thread count set must be
    numpy's."""
    import os
    numpy_site = os.path.dirname(os.path.dirname(np.__file__))
    paths = blas._numpy_openblas()
    assert paths
    assert all(os.path.commonpath([numpy_site, p]) == numpy_site and "numpy" in p
               for p in paths)


def test_small_batches_are_not_spread(monkeypatch):
    monkeypatch.setattr(blas, "SPREAD_MIN_FLOPS", 1 << 25)
    calls = []
    controls = blas._thread_controls()
    monkeypatch.setattr(blas, "_thread_controls",
                        lambda: (lambda n: calls.append(n), controls[1]))
    a, b, out = operands()  # 1.1 MFLOP
    blas.matmul_spread(a, b, out)
    assert calls == []
    np.testing.assert_array_equal(out, np.matmul(a, b))
    big_a, big_b, big_out = operands(rows=256, depth=64, cols=64)  # 75 MFLOP
    blas.matmul_spread(big_a, big_b, big_out)
    assert calls == [1, controls[1]()]
