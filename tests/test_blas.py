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


def accumulate_operands(rows, depth, cols, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, depth), dtype=np.float32),
            rng.standard_normal((depth, cols), dtype=np.float32))


@pytest.mark.parametrize("a_transposed", [False, True])
@pytest.mark.parametrize("b_transposed", [False, True])
def test_accumulate_into_zeros_is_numpy_product_bit_for_bit(a_transposed, b_transposed):
    """The solver clears gradients before each backward: there, one BLAS call with beta = 1
    gives numpy's product exactly (the same kernel sums the same terms into zero)."""
    a, b = accumulate_operands(37, 300, 53)
    if a_transposed:
        a = np.ascontiguousarray(a.T).T
    if b_transposed:
        b = np.ascontiguousarray(b.T).T
    out = np.zeros((37, 53), np.float32)
    assert blas.accumulate(a, b, out)
    np.testing.assert_array_equal(out, np.matmul(a, b))


def test_accumulate_adds_to_what_is_there():
    a, b = accumulate_operands(20, 30, 40, seed=1)
    out = np.random.default_rng(2).standard_normal((20, 40), dtype=np.float32)
    want = out.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    assert blas.accumulate(a, b, out)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_accumulate_into_a_block_of_a_larger_matrix():
    """Leading dimensions: operands and output may be row ranges and column ranges."""
    a, b = accumulate_operands(64, 48, 80, seed=3)
    big = np.zeros((70, 100), np.float32)
    assert blas.accumulate(a[:, 8:40], b[8:40, 10:60], big[3:67, 20:70])
    want = np.zeros_like(big)
    want[3:67, 20:70] = a[:, 8:40].astype(np.float64) @ b[8:40, 10:60].astype(np.float64)
    np.testing.assert_allclose(big, want, rtol=1e-5, atol=1e-5)


def test_accumulate_declines_what_blas_cannot_take():
    """Strides in both axes, float64, a transposed output: False, ``out`` untouched."""
    a, b = accumulate_operands(8, 6, 4)
    out = np.zeros((8, 4), np.float32)
    assert not blas.accumulate(a[::2, ::2], b[:3], out[:4])
    assert not blas.accumulate(a.astype(np.float64), b, out)
    assert not blas.accumulate(a, b, np.zeros((4, 8), np.float32).T)
    assert not out.any()


def test_accumulate_with_an_empty_depth_adds_nothing():
    out = np.ones((3, 4), np.float32)
    assert blas.accumulate(np.zeros((3, 0), np.float32), np.zeros((0, 4), np.float32), out)
    np.testing.assert_array_equal(out, 1)


def test_accumulate_rejects_mismatched_shapes():
    a, b = accumulate_operands(5, 6, 7)
    with pytest.raises(ValueError):
        blas.accumulate(a, b[:5], np.zeros((5, 7), np.float32))
