"""pycaffe_cli/blas.py: products on the private single-threaded OpenBLAS, on the calling
thread or in blocks over numba's threads; every layout BLAS can read, stacks with broadcast
leading axes, one-row and one-column products (GEMV), accumulation (beta = 1); numpy's own
OpenBLAS never touched."""
import ctypes
import glob
import os
import threading

import numba
import numpy as np
import pytest

from pycaffe_cli import blas
from tests.numerics import assert_product

RNG = np.random.default_rng(0)


def matrices(*shapes):
    return [RNG.standard_normal(shape, dtype=np.float32) for shape in shapes]


def transposed_copy(x):
    """``x`` with its last two axes stored the other way round (the same values)."""
    return np.ascontiguousarray(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)


@pytest.fixture(params=[1, 2], ids=["one thread", "two threads"])
def workers(request):
    """Products run on the calling thread (1) or spread over two of numba's threads."""
    before = numba.get_num_threads()
    numba.set_num_threads(min(request.param, numba.config.NUMBA_NUM_THREADS))
    yield request.param
    numba.set_num_threads(before)


# (m, k, n): tiny, one row (GEMV), one column (GEMV), the same large enough to be spread, and
# large enough to be spread in blocks along either side of the output.
SHAPES = [(3, 5, 7), (1, 300, 70), (70, 300, 1), (1, 1024, 600), (600, 1024, 1),
          (40, 500, 4096), (600, 300, 64)]


@pytest.mark.parametrize("m, k, n", SHAPES)
@pytest.mark.parametrize("layout", ["plain", "a transposed", "b transposed"])
def test_products(m, k, n, layout, workers):
    a, b = matrices((m, k), (k, n))
    a = transposed_copy(a) if layout == "a transposed" else a
    b = transposed_copy(b) if layout == "b transposed" else b
    out = np.full((m, n), np.nan, np.float32)
    blas.matmul(a, b, out)
    assert_product(out, a, b)


@pytest.mark.parametrize("m, k, n", SHAPES)
def test_accumulation(m, k, n, workers):
    a, b, out = matrices((m, k), (k, n), (m, n))
    start = out.copy()
    assert blas.accumulate(a, b, out)
    assert_product(out, a, b, addend=start)


def test_stacks_with_broadcast_weights(workers):
    """A convolution's groups and images: weights (groups, rows, depth) against columns
    (images, groups, depth, positions)."""
    w, x = matrices((2, 24, 36), (5, 2, 36, 900))
    out = np.full((5, 2, 24, 900), np.nan, np.float32)
    blas.matmul(w, x, out)
    assert_product(out, np.broadcast_to(w, (5, 2, 24, 36)), x)
    grouped = np.full((2, 24, 900), np.nan, np.float32)
    blas.matmul(w, x[0], grouped)
    assert_product(grouped, w, x[0])


def test_blocks_of_a_larger_matrix():
    """Leading dimensions: operands and output may be row and column ranges."""
    a, b = matrices((64, 48), (48, 80))
    big = np.zeros((70, 100), np.float32)
    assert blas.accumulate(a[:, 8:40], b[8:40, 10:60], big[3:67, 20:70])
    assert_product(big[3:67, 20:70], a[:, 8:40], b[8:40, 10:60])
    outside = np.ones(big.shape, bool)
    outside[3:67, 20:70] = False
    assert not big[outside].any()


def test_what_blas_cannot_read_goes_to_numpy():
    """Strides in both axes or float64: np.matmul's result; accumulate declines, out
    untouched."""
    a, b = matrices((8, 6), (6, 4))
    out = np.zeros((4, 4), np.float32)
    blas.matmul(a[::2, ::2], b[:3], out)
    np.testing.assert_array_equal(out, np.matmul(a[::2, ::2], b[:3]))
    out64 = np.empty((8, 4))
    blas.matmul(a.astype(np.float64), b.astype(np.float64), out64)
    np.testing.assert_allclose(out64, a.astype(np.float64) @ b, rtol=1e-12, atol=1e-12)
    untouched = np.zeros((8, 4), np.float32)
    assert not blas.accumulate(a.astype(np.float64), b, untouched)
    assert not blas.accumulate(a, b, np.zeros((4, 8), np.float32).T)
    assert not untouched.any()


def test_an_empty_depth():
    out = np.ones((3, 4), np.float32)
    assert blas.accumulate(np.zeros((3, 0), np.float32), np.zeros((0, 4), np.float32), out)
    np.testing.assert_array_equal(out, 1)
    blas.matmul(np.zeros((3, 0), np.float32), np.zeros((0, 4), np.float32), out)
    np.testing.assert_array_equal(out, 0)


def test_mismatched_shapes_are_refused():
    a, b = matrices((5, 6), (6, 7))
    with pytest.raises(ValueError, match="do not give"):
        blas.matmul(a, b[:5], np.zeros((5, 7), np.float32))
    with pytest.raises(ValueError, match="do not give"):
        blas.accumulate(a, b, np.zeros((5, 6), np.float32))


def _numpy_openblas_threads():
    """numpy's OpenBLAS thread count, read through its own library."""
    folder = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in glob.glob(os.path.join(folder, "*openblas*")):
        library = ctypes.CDLL(path)
        for name in ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads"):
            if hasattr(library, name):
                getter = getattr(library, name)
                getter.restype = ctypes.c_int
                return getter
    pytest.skip("numpy's BLAS is not an OpenBLAS bundled with numpy")


def test_numpy_openblas_is_never_changed():
    """numpy's OpenBLAS keeps its thread count while products run, watched from another
    thread."""
    count = _numpy_openblas_threads()
    before, seen, stop = count(), [], threading.Event()

    def watch():
        while not stop.is_set():
            seen.append(count())
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        a, b = matrices((256, 256), (256, 512))
        out = np.empty((256, 512), np.float32)
        for _ in range(20):
            blas.matmul(a, b, out)
    finally:
        stop.set()
        watcher.join()
    assert set(seen) <= {before} and count() == before


def test_the_private_openblas_runs_one_thread():
    getter = blas._PRIVATE.scipy_openblas_get_num_threads
    getter.restype = ctypes.c_int
    assert getter() == 1
    numpy_libraries = glob.glob(os.path.join(os.path.dirname(os.path.dirname(np.__file__)),
                                             "numpy.libs", "*"))
    assert blas._PRIVATE._name not in numpy_libraries


def test_blocks_cover_the_output_along_the_cheaper_side():
    """Two blocks a thread for large products, one for smaller; rows where b is the smaller
    operand (each block of rows packs b again), columns where a is."""
    rows, cols = blas._blocks(1000, 50, 640, 1, 2)     # b (640 x 50) smaller: cut rows
    assert cols == 50 and -(-1000 // rows) == 4
    rows, cols = blas._blocks(50, 1000, 640, 1, 2)     # a smaller: cut columns
    assert rows == 50 and -(-1000 // cols) == 4
    rows, cols = blas._blocks(32, 32, 2000, 1, 2)      # 4 MFLOP: one block a thread
    assert -(-32 // rows) * -(-32 // cols) == 2
    assert blas._blocks(64, 64, 64, 36, 2) == (64, 64)  # a stack: a product a block


def test_one_row_or_column_products_spread_from_fewer_multiply_adds():
    """A GEMV's time is its matrix read from memory: it spreads from GEMV_SPREAD_MIN
    multiply-adds; other products from SPREAD_MIN_FLOPS."""
    depth = 1024
    cols = blas.GEMV_SPREAD_MIN // depth
    assert blas.split(1, cols, depth, 2) != (0, 0)
    assert blas.split(cols, 1, depth, 2) != (0, 0)
    assert blas.split(1, cols - 1, depth, 2) == (0, 0)
    assert blas.split(1, cols, depth, 1) == (0, 0)
    assert 2 * 2 * cols * depth < blas.SPREAD_MIN_FLOPS
    assert blas.split(2, cols, depth, 2) == (0, 0)


def _claims_in_order(parts, total, thread):
    claims = np.zeros(parts, np.int64)
    order = []
    while (j := blas.claim_as(claims, total, thread)) < total:
        order.append(j)
    return order


def test_a_thread_claims_its_own_part_first_then_the_others_from_their_far_end():
    # 10 blocks in 3 parts: [0, 3), [3, 6), [6, 10)
    assert _claims_in_order(3, 10, 0) == [0, 1, 2, 5, 4, 3, 9, 8, 7, 6]
    assert _claims_in_order(3, 10, 2) == [6, 7, 8, 9, 2, 1, 0, 5, 4, 3]
    assert _claims_in_order(3, 10, 5) == [2, 1, 0, 5, 4, 3, 9, 8, 7, 6]  # owns no part
    assert _claims_in_order(1, 4, 0) == [0, 1, 2, 3]


def test_owner_and_thief_meet_without_taking_a_block_twice():
    claims = np.zeros(2, np.int64)
    taken = [blas.claim_as(claims, 6, 0), blas.claim_as(claims, 6, 1),   # own fronts: 0, 3
             blas.claim_as(claims, 6, 1), blas.claim_as(claims, 6, 1),   # 4, 5
             blas.claim_as(claims, 6, 1), blas.claim_as(claims, 6, 0),   # steals 2; own 1
             blas.claim_as(claims, 6, 0), blas.claim_as(claims, 6, 1)]   # none left
    assert taken == [0, 3, 4, 5, 2, 1, 6, 6]


@numba.njit(parallel=True)
def _claim_everything(parts, total, jobs):
    """Per block the number of times it was taken, jobs of threads claiming at once."""
    claims = np.zeros(parts, np.int64)
    taken = np.zeros((jobs, total), np.int64)
    for job in numba.prange(jobs):
        j = blas.claim(claims, total)
        while j < total:
            taken[job, j] += 1
            j = blas.claim(claims, total)
    return taken.sum(axis=0)


@pytest.mark.parametrize("parts, total, jobs", [(2, 4, 2), (2, 1000, 2), (3, 7, 5),
                                                (1, 50, 3), (4, 2, 4)])
def test_threads_claiming_at_once_take_every_block_once(parts, total, jobs):
    np.testing.assert_array_equal(_claim_everything(parts, total, jobs), np.ones(total))
