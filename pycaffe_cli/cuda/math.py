"""Caffe's GPU math functions (math_functions.cu) over flat float32 device arrays.

GEMMs go to cuBLAS through CuPy when CuPy is installed (``pip install pycaffe[gpu]``) and a
real device is in use; otherwise to ``_gemm_kernel`` below, one thread per output element,
which is correct everywhere (the CUDA simulator included) but far from cuBLAS's speed, so
pycaffe logs once that it is in use. Row-major throughout, as caffe_gpu_gemm:

    C (m x n) = alpha * op(A) (m x k) @ op(B) (k x n) + beta * C

Reductions (dot, asum, sumsq, and ``reduce_into`` for results that stay on the device) add
in float64 over a tree of grid-stride kernels (see the section's comment): repeatable, and
independent of the launch size.
"""
import functools

import numpy as np
from numba import cuda

from pycaffe_cli.cuda import memory
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.cuda.views import first
from pycaffe_cli.log import LOG


# --- GEMM ---------------------------------------------------------------------------------
@cuda.jit(cache=True)
def _gemm_kernel(n_out, trans_a, trans_b, m, n, k, alpha, a, b, beta, c):
    for index in range(cuda.grid(1), n_out, cuda.gridsize(1)):
        i = index // n
        j = index % n
        total = np.float32(0)
        for p in range(k):
            a_ip = a[p * m + i] if trans_a else a[i * k + p]
            b_pj = b[j * k + p] if trans_b else b[p * n + j]
            total += a_ip * b_pj
        if beta == 0:
            c[index] = alpha * total
        else:
            c[index] = alpha * total + beta * c[index]


def cupy_blas():
    """``cupy`` when it is installed and can run on a real device, else None (the fallback
    is logged once)."""
    cupy = _import_cupy()
    if cupy is None:
        _log_fallback()
    return cupy


@functools.cache
def _log_fallback():
    """The cuBLAS fallback notice, once per process."""
    LOG.warning("CuPy is not installed (or cannot run here): GEMMs run on pycaffe's own CUDA "
                "kernel, much slower than cuBLAS; pip install 'pycaffe[gpu]' to use cuBLAS")


def use_device(device_id):
    """Make ``device_id`` CuPy's current device too (cuBLAS runs where the blobs live)."""
    cupy = _import_cupy()
    if cupy is not None:
        cupy.cuda.Device(device_id).use()


@functools.cache
def _import_cupy():
    from numba import config
    if config.ENABLE_CUDASIM:
        return None
    try:
        import cupy
        import cupy.cublas  # noqa: F401
    except Exception:  # not installed, or a CUDA/driver mismatch: use the fallback kernel
        return None
    return cupy


def gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c):
    """C = alpha op(A) op(B) + beta C on flat row-major device arrays (caffe_gpu_gemm).

    ``a`` holds op(A) transposed when ``trans_a`` (k x m), likewise ``b`` (n x k); ``beta``
    0 never reads C, as BLAS.
    """
    if m == 0 or n == 0:
        return
    if k == 0:  # C = beta C; cuBLAS would reject the empty operand's leading dimension
        if beta == 0:
            memory.fill(c[:m * n], 0)
        else:
            scal(m * n, beta, c)
        return
    cupy = cupy_blas()
    if cupy is None:
        launch(_gemm_kernel, m * n, bool(trans_a), bool(trans_b), m, n, k, np.float32(alpha),
               a, b, np.float32(beta), c)
        return
    a2 = cupy.asarray(first(a, m * k)).reshape((k, m) if trans_a else (m, k))
    b2 = cupy.asarray(first(b, k * n)).reshape((n, k) if trans_b else (k, n))
    c2 = cupy.asarray(first(c, m * n)).reshape(m, n)
    cupy.cublas.gemm("T" if trans_a else "N", "T" if trans_b else "N", a2, b2, out=c2,
                     alpha=float(alpha), beta=float(beta))


def gemv(trans_a, m, n, alpha, a, x, beta, y):
    """y = alpha op(A) x + beta y, A row-major m x n (caffe_gpu_gemv)."""
    if trans_a:
        gemm(True, False, n, 1, m, alpha, a, x, beta, y)
    else:
        gemm(False, False, m, 1, n, alpha, a, x, beta, y)


# --- element-wise -------------------------------------------------------------------------
@cuda.jit(cache=True)
def _axpby_kernel(n, alpha, x, beta, y):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        if beta == 0:
            y[index] = alpha * x[index]
        else:
            y[index] = alpha * x[index] + beta * y[index]


@cuda.jit(cache=True)
def _scal_kernel(n, alpha, x):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        x[index] *= alpha


@cuda.jit(cache=True)
def _add_scalar_kernel(n, alpha, x):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        x[index] += alpha


@cuda.jit(cache=True)
def _binary_kernel(n, op, a, b, y):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        if op == 0:
            y[index] = a[index] + b[index]
        elif op == 1:
            y[index] = a[index] - b[index]
        elif op == 2:
            y[index] = a[index] * b[index]
        else:
            y[index] = a[index] / b[index]


@cuda.jit(cache=True)
def _sign_kernel(n, x, y):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        value = x[index]
        if value > 0:
            y[index] = 1
        elif value < 0:
            y[index] = -1
        else:
            y[index] = 0


def axpy(n, alpha, x, y):
    """y += alpha x (caffe_gpu_axpy)."""
    axpby(n, alpha, x, 1.0, y)


def axpby(n, alpha, x, beta, y):
    """y = alpha x + beta y; ``beta`` 0 never reads y (caffe_gpu_axpby)."""
    launch(_axpby_kernel, n, np.float32(alpha), x, np.float32(beta), y)


def scal(n, alpha, x):
    """x *= alpha (caffe_gpu_scal)."""
    launch(_scal_kernel, n, np.float32(alpha), x)


def add_scalar(n, alpha, x):
    """x += alpha (caffe_gpu_add_scalar)."""
    launch(_add_scalar_kernel, n, np.float32(alpha), x)


def add(n, a, b, y):
    """y = a + b."""
    launch(_binary_kernel, n, 0, a, b, y)


def sub(n, a, b, y):
    """y = a - b."""
    launch(_binary_kernel, n, 1, a, b, y)


def mul(n, a, b, y):
    """y = a * b."""
    launch(_binary_kernel, n, 2, a, b, y)


def div(n, a, b, y):
    """y = a / b."""
    launch(_binary_kernel, n, 3, a, b, y)


def sign(n, x, y):
    """y = sign(x) in {-1, 0, 1} (caffe_gpu_sign)."""
    launch(_sign_kernel, n, x, y)


# --- reductions ---------------------------------------------------------------------------
# A tree of plain grid-stride kernels, no shared memory or atomics: partial p of a level of m
# partials adds items p, p + m, p + 2m, ... of the level below (coalesced reads), each level
# about FAN_IN times smaller, and one thread adds the last few. Which items meet in which
# partial depends on n alone, so a sum is the same on every run and for every launch size.
# The float64 partials live in one buffer that only grows (all work runs in order on one
# stream, so callers can share it).
FAN_IN = 32
SUM, ASUM, SUMSQ, DOT = 0, 1, 2, 3
_partials_buffer = [None]


@cuda.jit(cache=True)
def _first_level_kernel(m, n, op, x, y, out):
    """out[p] = the float64 sum of term(x, y) over items p, p + m, ... of the n."""
    for p in range(cuda.grid(1), m, cuda.gridsize(1)):
        total = 0.0
        for index in range(p, n, m):
            value = np.float64(x[index])
            if op == SUM:
                total += value
            elif op == ASUM:
                total += abs(value)
            elif op == SUMSQ:
                total += value * value
            else:
                total += value * np.float64(y[index])
        out[p] = total


@cuda.jit(cache=True)
def _next_level_kernel(m, n, sums, out):
    """out[p] = sums[p] + sums[p + m] + ... (of the first n)."""
    for p in range(cuda.grid(1), m, cuda.gridsize(1)):
        total = 0.0
        for index in range(p, n, m):
            total += sums[index]
        out[p] = total


@cuda.jit(cache=True)
def _finish_kernel(one, n, sums, divisor, out):
    """out[0] = (sums[0] + ... + sums[n - 1]) / divisor, rounded once to float32."""
    for _ in range(cuda.grid(1), one, cuda.gridsize(1)):
        total = 0.0
        for index in range(n):
            total += sums[index]
        out[0] = np.float32(total / divisor)


def partials(count):
    """The first ``count`` values of the shared float64 partial-sums buffer."""
    if _partials_buffer[0] is None or _partials_buffer[0].size < count:
        _partials_buffer[0] = cuda.device_array(count, np.float64)
    return _partials_buffer[0][:count]


def level_sizes(n):
    """Sizes of the partial-sum levels for n > 0 values: ceil(n / FAN_IN), then again while
    more than FAN_IN remain."""
    sizes = [-(-n // FAN_IN)]
    while sizes[-1] > FAN_IN:
        sizes.append(-(-sizes[-1] // FAN_IN))
    return sizes


def split(buffer, sizes):
    """Consecutive slices of ``buffer`` with the given sizes."""
    ends = np.cumsum([0] + list(sizes))
    return [buffer[int(start):int(end)] for start, end in zip(ends, ends[1:])]


def fold(levels):
    """Add each level of partial sums into the next; the last level holds <= FAN_IN values."""
    for level, following in zip(levels, levels[1:]):
        launch(_next_level_kernel, following.size, level.size, level, following)
    return levels[-1]


def reduce_into(n, op, x, y, divisor, out):
    """out[0] = (the float64 sum of term(x, y) over n items) / divisor, as float32, written
    on the device (a loss top's flat view, say); nothing comes to the host."""
    if n == 0:
        memory.fill(out, 0)
        return
    sizes = level_sizes(n)
    levels = split(partials(sum(sizes)), sizes)
    launch(_first_level_kernel, sizes[0], n, op, x, y, levels[0])
    last = fold(levels)
    launch(_finish_kernel, 1, last.size, last, np.float64(divisor), out)


def _reduce(n, op, x, y):
    """The float64 sum of term(x, y) over n items, on the host (one 8-byte copy)."""
    if n == 0:
        return 0.0
    sizes = level_sizes(n)
    buffer = partials(1 + sum(sizes))
    levels = split(buffer[1:], sizes)
    launch(_first_level_kernel, sizes[0], n, op, x, y, levels[0])
    last = fold(levels)
    launch(_next_level_kernel, 1, last.size, last, buffer[:1])
    return float(buffer[:1].copy_to_host()[0])


def dot(n, x, y):
    """sum x * y, in float64 (caffe_gpu_dot)."""
    return _reduce(n, DOT, x, y)


def asum(n, x):
    """sum |x|, in float64 (caffe_gpu_asum)."""
    return _reduce(n, ASUM, x, x)


def sumsq(n, x):
    """sum x^2, in float64."""
    return _reduce(n, SUMSQ, x, x)
