"""matmul_batch: a batch of GEMMs over numba's threads on the private single-threaded
OpenBLAS, no thread count changed; accumulate: one BLAS call with beta = 1."""
import ctypes
import os
import threading

import numpy as np
import pytest

from pycaffe_cli import blas
from tests.numerics import assert_product


def operands(batch=36, rows=24, depth=16, cols=40, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((batch, rows, depth)).astype(np.float32)
    b = rng.standard_normal((batch, depth, cols)).astype(np.float32)
    return a, b, np.full((batch, rows, cols), np.nan, np.float32)


def numpy_thread_count():
    """numpy's OpenBLAS thread count, read through its own library."""
    for library in blas._libraries():
        for name in ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
                     "openblas_get_num_threads64_", "openblas_get_num_threads"):
            if hasattr(library, name):
                getter = getattr(library, name)
                getter.restype = ctypes.c_int
                return getter()
    pytest.skip("numpy's BLAS is not an OpenBLAS bundled with numpy")


@pytest.mark.parametrize("threaded", [True, False])
@pytest.mark.parametrize("batch", [1, 2, 3, 36])
def test_the_products_on_both_paths(batch, threaded, monkeypatch):
    monkeypatch.setattr(blas, "BATCH_PARALLEL_MIN_FLOPS", 0 if threaded else 1 << 62)
    a, b, out = operands(batch=batch)
    blas.matmul_batch(a, b, out)
    assert_product(out, a, b)


def test_numpy_thread_count_is_never_changed():
    """numpy's OpenBLAS keeps its thread count while batches run on other threads."""
    before = numpy_thread_count()
    seen = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            seen.append(numpy_thread_count())
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        big = operands(rows=256, depth=64, cols=64)  # 75 MFLOP: the threaded path
        for _ in range(20):
            blas.matmul_batch(*big)
    finally:
        stop.set()
        watcher.join()
    assert set(seen) <= {before} and numpy_thread_count() == before


def test_the_private_openblas_is_not_numpys_and_runs_one_thread():
    private = blas._PRIVATE
    assert private._name not in blas._numpy_openblas()
    getter = private.scipy_openblas_get_num_threads
    getter.restype = ctypes.c_int
    assert getter() == 1


def test_other_layouts_and_types_go_to_numpy():
    a, b, out = operands()
    blas.matmul_batch(np.ascontiguousarray(a.transpose(0, 2, 1)).transpose(0, 2, 1), b, out)
    assert_product(out, a, b)
    out64 = np.empty(out.shape)
    blas.matmul_batch(a.astype(np.float64), b.astype(np.float64), out64)
    np.testing.assert_allclose(out64, a.astype(np.float64) @ b, rtol=1e-12, atol=1e-12)


def test_an_empty_depth_gives_zeros():
    a, b, out = operands(depth=0)
    blas.matmul_batch(a, b, out)
    np.testing.assert_array_equal(out, 0)


def test_mismatched_shapes_are_refused():
    a, b, out = operands()
    with pytest.raises(ValueError, match="do not give"):
        blas.matmul_batch(a, b[:, :-1], out)


def test_only_numpy_own_openblas_is_used_for_accumulate():
    """Other wheels bundle OpenBLAS too (OpenCV's does): ``accumulate`` calls numpy's."""
    numpy_site = os.path.dirname(os.path.dirname(np.__file__))
    paths = blas._numpy_openblas()
    assert paths
    assert all(os.path.commonpath([numpy_site, p]) == numpy_site and "numpy" in p
               for p in paths)


def accumulate_operands(rows, depth, cols, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, depth), dtype=np.float32),
            rng.standard_normal((depth, cols), dtype=np.float32))


@pytest.mark.parametrize("a_transposed", [False, True])
@pytest.mark.parametrize("b_transposed", [False, True])
def test_accumulate_into_zeros_is_the_product(a_transposed, b_transposed):
    """The solver clears gradients before each backward: accumulating into zeros gives the
    product (within the float32 bound; BLAS kernels may order the sum differently for
    beta = 1 than numpy's beta = 0)."""
    a, b = accumulate_operands(37, 300, 53)
    if a_transposed:
        a = np.ascontiguousarray(a.T).T
    if b_transposed:
        b = np.ascontiguousarray(b.T).T
    out = np.zeros((37, 53), np.float32)
    assert blas.accumulate(a, b, out)
    assert_product(out, a, b)


def test_accumulate_adds_to_what_is_there():
    a, b = accumulate_operands(20, 30, 40, seed=1)
    out = np.random.default_rng(2).standard_normal((20, 40), dtype=np.float32)
    start = out.copy()
    assert blas.accumulate(a, b, out)
    assert_product(out, a, b, addend=start)


def test_accumulate_into_a_block_of_a_larger_matrix():
    """Leading dimensions: operands and output may be row ranges and column ranges."""
    a, b = accumulate_operands(64, 48, 80, seed=3)
    big = np.zeros((70, 100), np.float32)
    assert blas.accumulate(a[:, 8:40], b[8:40, 10:60], big[3:67, 20:70])
    assert_product(big[3:67, 20:70], a[:, 8:40], b[8:40, 10:60])
    outside = np.ones(big.shape, bool)
    outside[3:67, 20:70] = False
    assert not big[outside].any()


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
