"""The CUDA math functions (pycaffe_cli/cuda/math.py) against numpy, in the simulator
(or on a real device), plus the cuBLAS argument mapping against a numpy stand-in for CuPy."""
import itertools

import numpy as np
import pytest

from pycaffe_cli.cuda import math as gpu_math
from pycaffe_cli.cuda import fill, memory
from tests.numerics import close_to

pytestmark = pytest.mark.usefixtures("gpu_mode")
RNG = np.random.default_rng(11)


def device(array):
    return memory.empty(array.size) if array is None else _upload(array)


def _upload(array):
    out = memory.empty(array.size, array.dtype)
    out.copy_to_device(np.ascontiguousarray(array).ravel())
    return out


def reference_gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c):
    a2 = a.reshape((k, m)).T if trans_a else a.reshape(m, k)
    b2 = b.reshape((n, k)).T if trans_b else b.reshape(k, n)
    out = alpha * (a2.astype(np.float64) @ b2) + (beta * c.reshape(m, n) if beta else 0)
    return out.astype(np.float32).ravel()


@pytest.mark.parametrize("trans_a, trans_b", list(itertools.product((False, True), repeat=2)))
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 1.0), (-2.0, 0.25)])
def test_gemm_fallback_kernel(trans_a, trans_b, alpha, beta):
    m, n, k = 5, 7, 3
    a = RNG.normal(size=m * k).astype(np.float32)
    b = RNG.normal(size=k * n).astype(np.float32)
    c = RNG.normal(size=m * n).astype(np.float32)
    c_device = _upload(c if beta else np.full(m * n, np.nan, np.float32))  # beta 0: C unread
    gpu_math.gemm(trans_a, trans_b, m, n, k, alpha, _upload(a), _upload(b), beta, c_device)
    np.testing.assert_allclose(c_device.copy_to_host(),
                               reference_gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("trans_a", [False, True])
def test_gemv(trans_a):
    m, n = 4, 6
    a = RNG.normal(size=m * n).astype(np.float32)
    x = RNG.normal(size=m if trans_a else n).astype(np.float32)
    y = RNG.normal(size=n if trans_a else m).astype(np.float32)
    y_device = _upload(y)
    gpu_math.gemv(trans_a, m, n, 2.0, _upload(a), _upload(x), 0.5, y_device)
    a2 = a.reshape(m, n).T if trans_a else a.reshape(m, n)
    np.testing.assert_allclose(y_device.copy_to_host(), 2 * a2 @ x + 0.5 * y, rtol=1e-5,
                               atol=1e-6)


def cublas_leading_dimension_ok(matrix):
    """CuPy passes a 2-d array to cuBLAS column-major: an F-contiguous one (zero-size and
    single-row/column arrays count) as it is, with ld = rows, a C-contiguous one transposed,
    with ld = columns; cuBLAS rejects an ld below 1."""
    return (matrix.shape[0] if matrix.flags.f_contiguous else matrix.shape[1]) >= 1


class FakeCupy:
    """Enough of CuPy for ``gemm``'s cuBLAS path, computed with numpy (asarray = a view),
    refusing what real cuBLAS refuses."""

    class cublas:  # noqa: N801
        calls = []

        @staticmethod
        def gemm(transa, transb, a, b, out, alpha, beta):
            for matrix in (a, b, out):
                assert cublas_leading_dimension_ok(matrix), ("cuBLAS: invalid ld", matrix.shape)
            FakeCupy.cublas.calls.append((transa, transb, a.shape, b.shape, out.shape))
            op_a = a.T if transa == "T" else a
            op_b = b.T if transb == "T" else b
            out[...] = alpha * (op_a @ op_b) + beta * out

    @staticmethod
    def asarray(device_array):
        return device_array.host


class HostArray:
    def __init__(self, array):
        self.host = array

    @property
    def shape(self):
        return self.host.shape

    def __getitem__(self, index):
        return HostArray(self.host[index])


@pytest.mark.parametrize("trans_a, trans_b", list(itertools.product((False, True), repeat=2)))
def test_gemm_hands_cublas_row_major_views(trans_a, trans_b, monkeypatch):
    m, n, k = 3, 4, 5
    a = RNG.normal(size=m * k + 2).astype(np.float32)   # longer buffers: views are cut
    b = RNG.normal(size=k * n + 3).astype(np.float32)
    c = RNG.normal(size=m * n).astype(np.float32)
    want = reference_gemm(trans_a, trans_b, m, n, k, 1.5, a[:m * k], b[:k * n], 0.5, c)
    monkeypatch.setattr(gpu_math, "cupy_blas", lambda: FakeCupy)
    FakeCupy.cublas.calls.clear()
    gpu_math.gemm(trans_a, trans_b, m, n, k, 1.5, HostArray(a), HostArray(b), 0.5,
                  HostArray(c))
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)  # float32 vs float64 sums
    assert FakeCupy.cublas.calls == [("T" if trans_a else "N", "T" if trans_b else "N",
                                      (k, m) if trans_a else (m, k),
                                      (n, k) if trans_b else (k, n), (m, n))]


@pytest.mark.parametrize("trans_a, trans_b", list(itertools.product((False, True), repeat=2)))
@pytest.mark.parametrize("m, n, k", [(1, 4, 5), (3, 1, 5), (3, 4, 1), (1, 1, 1)])
def test_gemm_single_row_or_column_operands_reach_cublas_validly(trans_a, trans_b, m, n, k,
                                                                  monkeypatch):
    a = RNG.normal(size=m * k).astype(np.float32)
    b = RNG.normal(size=k * n).astype(np.float32)
    c = RNG.normal(size=m * n).astype(np.float32)
    want = reference_gemm(trans_a, trans_b, m, n, k, 2.0, a, b, 1.0, c)
    monkeypatch.setattr(gpu_math, "cupy_blas", lambda: FakeCupy)
    gpu_math.gemm(trans_a, trans_b, m, n, k, 2.0, HostArray(a), HostArray(b), 1.0,
                  HostArray(c))
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("use_fake_cublas", [False, True])
@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_gemm_with_empty_inner_dimension_scales_c(use_fake_cublas, beta, monkeypatch):
    if use_fake_cublas:
        monkeypatch.setattr(gpu_math, "cupy_blas", lambda: FakeCupy)
    m, n = 3, 4
    c = RNG.normal(size=m * n).astype(np.float32)
    c_device = _upload(c if beta else np.full(m * n, np.nan, np.float32))
    empty = memory.empty(0)
    gpu_math.gemm(False, False, m, n, 0, 1.0, empty, empty, beta, c_device)
    np.testing.assert_array_equal(c_device.copy_to_host(), (beta * c).astype(np.float32))


@pytest.mark.parametrize("n", [1, 31, 64, 1000])
def test_reductions_in_float64(n):
    x = RNG.normal(size=n).astype(np.float32)
    y = RNG.normal(size=n).astype(np.float32)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    assert gpu_math.dot(n, _upload(x), _upload(y)) == pytest.approx(x64 @ y64, rel=1e-12,
                                                                     abs=1e-12)
    assert gpu_math.asum(n, _upload(x)) == pytest.approx(np.abs(x64).sum(), rel=1e-12)
    assert gpu_math.sumsq(n, _upload(x)) == pytest.approx(x64 @ x64, rel=1e-12)


def test_reductions_of_nothing_are_zero():
    empty = memory.empty(0)
    assert gpu_math.dot(0, empty, empty) == 0.0 and gpu_math.asum(0, empty) == 0.0


def test_elementwise_functions():
    n = 50
    a = RNG.normal(size=n).astype(np.float32)
    b = RNG.uniform(0.5, 2, size=n).astype(np.float32)
    cases = [(gpu_math.add, a + b), (gpu_math.sub, a - b), (gpu_math.mul, a * b),
             (gpu_math.div, a / b)]
    for function, want in cases:
        out = memory.empty(n)
        function(n, _upload(a), _upload(b), out)
        np.testing.assert_array_equal(out.copy_to_host(), want, err_msg=function.__name__)
    x = np.array([-2, 0, 3, -0.0], np.float32)
    out = memory.empty(4)
    gpu_math.sign(4, _upload(x), out)
    np.testing.assert_array_equal(out.copy_to_host(), [-1, 0, 1, 0])
    y = _upload(b)
    gpu_math.axpby(n, 2.0, _upload(a), 0.5, y)
    close_to(y.copy_to_host(), 2 * a + 0.5 * b, rtol=1e-6)
    gpu_math.scal(n, 3.0, y)
    gpu_math.add_scalar(n, 1.0, y)
    close_to(y.copy_to_host(), 3 * (2 * a + 0.5 * b) + 1, rtol=1e-5)
    filled = memory.empty(7)
    memory.fill(filled, 2.5)
    np.testing.assert_array_equal(filled.copy_to_host(), np.full(7, 2.5))


def test_memory_defines_no_kernel():
    # numba's simulator swaps the `cuda` global of a kernel's module while the kernel runs;
    # memory's host functions also run on the data prefetch thread, which then met the
    # simulator's stand-in (test_data's GPU prefetch failed on `cuda.select_device`)
    kernels = [name for name, value in vars(memory).items()
               if type(value).__name__ in ("FakeCUDAKernel", "CUDADispatcher")]
    assert kernels == []
    assert memory.fill is fill.fill
