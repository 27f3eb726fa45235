"""pycaffe's matrix products: a private single-threaded OpenBLAS, spread over numba's threads.

Every GEMM the engine's CPU layers issue (convolutions, inner products, their gradients,
Winograd's batches) goes through ``matmul`` (``out = a @ b``) or ``accumulate`` (``out += a @
b``, BLAS's beta = 1, as Caffe's weight gradients use it). Each product is cut into blocks of
output rows or columns; numba's threads take blocks from a shared counter until none is left,
each block one call to cblas_sgemm of a private OpenBLAS (the scipy-openblas32 wheel, loaded
here, set to one thread once, used by nothing else).

Why not numpy's matmul: numpy's OpenBLAS keeps a thread pool of its own beside numba's, and
splits each product evenly between its threads. On a machine where another process wants a
core, the thread that shares that core finishes its half late, every product waits for it,
and the two pools take turns layer by layer (MobileNet v2 at batch 10 ran 2.2-2.5x slower with
one busy process on a 2-core machine; with this module, see docs/benchmarks.md). Here one pool
does all the work, and the blocks go to whichever thread is running: a descheduled thread
simply takes fewer. numpy's OpenBLAS is never called by the engine's layers and never has its
settings changed, so a user's own numpy code (``import caffe``) keeps its threads.

A product whose operands BLAS cannot describe (a float64 array, strides in both axes) is left
to ``np.matmul``.
"""
import ctypes
import os

import llvmlite.binding
import numba
import numpy as np
import scipy_openblas32
from numba import float32, njit, prange, types
from numba.extending import intrinsic

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_FLOAT32 = np.dtype(np.float32)
_UNIT = _FLOAT32.itemsize
# Products of fewer FLOPs than this (GEMVs aside, below) run on the calling thread: waking
# numba's threads costs about as much (docs/kernel-choices.md, "Spreading a product").
SPREAD_MIN_FLOPS = 1 << 22
# Products with one row or one column (GEMV: a batch-1 classifier) read each value of the
# matrix once, and take the time that read takes from memory, which two cores do faster than
# one: they spread from this many multiply-adds (a 2 MB matrix) however few their FLOPs
# (docs/kernel-choices.md, "Spreading a product").
GEMV_SPREAD_MIN = 1 << 19
# Products of at least this many FLOPs a thread go in two blocks a thread, so that a thread
# held up by another process leaves part of its share to the others; smaller ones in one
# block a thread. More blocks cost more than they balance: each block packs again the operand
# it shares with the others (docs/kernel-choices.md, "Spreading a product").
BALANCE_MIN_FLOPS = 1 << 23
# Block sides are multiples of this (OpenBLAS's single-precision micro-kernels work on 4 to
# 16 rows or columns at a time).
BLOCK_ALIGN = 4
# The symbol numba-compiled code calls the private cblas_sgemm by (resolved when this module
# is imported, so kernels cached on disk find it too).
_PRIVATE_SGEMM = "pycaffe_private_cblas_sgemm"
_PRIVATE_SGEMV = "pycaffe_private_cblas_sgemv"


def _load_private_openblas():
    """Load scipy-openblas32's library, set it to one thread (nothing else in the process
    uses it), and make its cblas_sgemm callable from numba code by name."""
    folder = scipy_openblas32.get_lib_dir()
    names = sorted(name for name in os.listdir(folder) if name.startswith("libscipy_openblas")
                   and name.endswith((".so", ".dylib", ".dll")))
    library = ctypes.CDLL(os.path.join(folder, names[0]))
    library.scipy_openblas_set_num_threads(1)
    for symbol, function in ((_PRIVATE_SGEMM, library.scipy_cblas_sgemm),
                             (_PRIVATE_SGEMV, library.scipy_cblas_sgemv)):
        llvmlite.binding.add_symbol(symbol, ctypes.cast(function, ctypes.c_void_p).value)
    return library


_PRIVATE = _load_private_openblas()
# cblas_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), with
# the pointers passed as pointer-sized integers (the same registers in the C calling
# convention) so that arrays' ``ctypes.data`` can be handed over.
_int, _pointer = types.int32, types.intp
_sgemm = types.ExternalFunction(_PRIVATE_SGEMM, types.void(
    _int, _int, _int, _int, _int, _int, types.float32, _pointer, _int, _pointer, _int,
    types.float32, _pointer, _int))
# cblas_sgemv(order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy): a product with one
# row or one column, which OpenBLAS's sgemm runs several times slower.
_sgemv = types.ExternalFunction(_PRIVATE_SGEMV, types.void(
    _int, _int, _int, _int, types.float32, _pointer, _int, _pointer, _int, types.float32,
    _pointer, _int))


@njit(cache=True, nogil=True, inline="always")
def _ceil(x, y):
    return -(-x // y)


@njit(cache=True, nogil=True)
def _layout(rows, cols, row_stride, col_stride):
    """(BLAS transpose flag, leading dimension) of a rows x cols float32 matrix with these
    byte strides, for a row-major cblas call; (0, 0) where BLAS cannot read it."""
    if (cols == 1 or col_stride == 4) and (rows == 1 or row_stride % 4 == 0):
        lead = row_stride // 4 if rows > 1 else cols
        if lead >= cols:
            return _NO_TRANS, max(lead, 1)
    if (rows == 1 or row_stride == 4) and (cols == 1 or col_stride % 4 == 0):
        lead = col_stride // 4 if cols > 1 else rows
        if lead >= rows:
            return _TRANS, max(lead, 1)
    return 0, 0


@njit(cache=True, nogil=True)
def _blocks(m, n, k, products, workers):
    """(rows a block, columns a block) of each product, for ``workers`` threads: one or two
    blocks a thread in all (see BALANCE_MIN_FLOPS), cut along the output's rows where b
    (which every block of rows packs again) is the smaller operand, along its columns where
    a is."""
    flops = 2 * products * m * n * k
    wanted = workers * (2 if flops >= BALANCE_MIN_FLOPS * workers else 1)
    pieces = _ceil(wanted, products)
    if pieces == 1:
        return m, n
    if (k * n <= m * k and m >= pieces * BLOCK_ALIGN) or n < pieces * BLOCK_ALIGN:
        return min(m, _ceil(_ceil(m, pieces), BLOCK_ALIGN) * BLOCK_ALIGN), n
    return m, min(n, _ceil(_ceil(n, pieces), BLOCK_ALIGN) * BLOCK_ALIGN)


@njit(cache=True, nogil=True, inline="always")
def _spreads(m, n, k, products, workers):
    """Whether ``products`` m x n x k products go over ``workers`` threads."""
    multiply_adds = products * m * n * k
    if workers < 2:
        return False
    if m == 1 or n == 1:
        return multiply_adds >= GEMV_SPREAD_MIN
    return 2 * multiply_adds >= SPREAD_MIN_FLOPS


@njit(cache=True, nogil=True)
def split(m, n, k, workers):
    """How kernels that schedule their own blocks cut one m x n x k product for ``workers``
    threads, as ``matmul`` does: (rows a block, columns a block), or (0, 0) where the product
    is too small to spread and runs on the calling thread."""
    if not _spreads(m, n, k, 1, workers):
        return 0, 0
    return _blocks(m, n, k, 1, workers)


@intrinsic
def _fetch_add(typingctx, counters, index, value):
    """counters[index] += value atomically; the value before."""
    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        pointer = builder.gep(array.data, [args[1]])
        return builder.atomic_rmw("add", pointer, args[2], "monotonic")
    return types.int64(counters, types.intp, types.int64), codegen


# A part's claims word: blocks taken from its front in the low 32 bits, from its back above.
_FROM_BACK = 1 << 32
_FRONT_MASK = _FROM_BACK - 1


@njit(cache=True, nogil=True, inline="always")
def _part_bounds(total, parts, part):
    return part * total // parts, (part + 1) * total // parts


@njit(cache=True, nogil=True, inline="always")
def _ends(taken):
    """(blocks taken from the front, from the back) of a part's claims word."""
    return taken & _FRONT_MASK, taken >> 32


@njit(cache=True, nogil=True)
def claim(claims, total):
    """The next of ``total`` blocks for the calling thread, or ``total`` when none is left.
    The blocks are cut into ``claims.size`` parts (a zeroed int64 array, a word a part),
    part t numba thread t's: a thread takes its own part's blocks from the front, then the
    other parts' from the back. So a kernel run again gives each thread mostly the blocks it
    had before, whose data its core still holds; a thread held up by another process leaves
    its blocks to the others. numba links ``get_thread_id`` once its pool has started:
    callers ask for ``numba.get_num_threads()`` (which starts it) before compiling this."""
    return claim_as(claims, total, numba.get_thread_id())


@njit(cache=True, nogil=True)
def claim_as(claims, total, thread):
    """``claim`` for thread number ``thread``. Every add to a part's word is one attempt;
    an attempt takes a block only while fewer than the part's blocks were taken before it
    (front + back), so the two ends never take the same block and, once the part is used
    up, every later attempt finds it so."""
    parts = claims.size
    if thread < parts:
        front, back = _ends(_fetch_add(claims, thread, 1))
        start, stop = _part_bounds(total, parts, thread)
        if front + back < stop - start:
            return start + front
    for step in range(1, parts + 1):
        part = (thread + step) % parts
        front, back = _ends(_fetch_add(claims, part, _FROM_BACK))
        start, stop = _part_bounds(total, parts, part)
        if front + back < stop - start:
            return stop - 1 - back
    return total


@njit(cache=True, nogil=True, inline="always")
def thread_part(buffer, size):
    """(this thread's ``size`` values of ``buffer``, numba's thread id): part ``id`` of a
    scratch buffer with a part for each thread, so that each thread writes only memory it
    wrote before; (a fresh array, -1) where the buffer has no part for the id."""
    thread = numba.get_thread_id()
    if (thread + 1) * size <= buffer.size:
        return buffer[thread * size:(thread + 1) * size], thread
    return np.empty(size, buffer.dtype), -1


@njit(cache=True, nogil=True, inline="always")
def product(m, n, k, a, lda, b, ldb, c, ldc):
    """c = a @ b on the calling thread, for row-major float32 matrices given by address and
    leading dimension: a (m x k), b (k x n), c (m x n)."""
    if m == 1:
        _sgemv(_ROW_MAJOR, _TRANS, k, n, float32(1), b, ldb, a, 1, float32(0), c, 1)
    elif n == 1:
        _sgemv(_ROW_MAJOR, _NO_TRANS, m, k, float32(1), a, lda, b, ldb, float32(0), c, ldc)
    else:
        _sgemm(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, m, n, k, float32(1), a, lda, b, ldb,
               float32(0), c, ldc)


@njit(cache=True, nogil=True, inline="always")
def _step(x, axis):
    """The byte step between x's products along a leading axis: 0 where it is broadcast."""
    return 0 if x.shape[axis] == 1 else x.strides[axis]


@njit(cache=True, nogil=True)
def _block(j, a, b, out, beta, block_m, block_n, trans_a, lda, trans_b, ldb, ldc):
    """Compute block ``j`` of out = a @ b + beta out, for 4-d (outer, inner, rows, columns)
    float32 arrays whose leading axes broadcast, in blocks of block_m x block_n."""
    m, n, k = out.shape[2], out.shape[3], a.shape[3]
    down, across = _ceil(m, block_m), _ceil(n, block_n)
    p, rest = j // (down * across), j % (down * across)
    outer, inner = p // out.shape[1], p % out.shape[1]
    r0, c0 = (rest // across) * block_m, (rest % across) * block_n
    rows, cols = min(block_m, m - r0), min(block_n, n - c0)
    pa = (a.ctypes.data + outer * _step(a, 0) + inner * _step(a, 1) + r0 * a.strides[2])
    pb = (b.ctypes.data + outer * _step(b, 0) + inner * _step(b, 1) + c0 * b.strides[3])
    pc = (out.ctypes.data + outer * out.strides[0] + inner * out.strides[1]
          + r0 * out.strides[2] + c0 * out.strides[3])
    if m == 1:      # out row = b^T a row: b read as (k x n) row-major, or transposed
        if trans_b == _NO_TRANS:
            _sgemv(_ROW_MAJOR, _TRANS, k, cols, float32(1), pb, ldb, pa, a.strides[3] // 4,
                   beta, pc, out.strides[3] // 4)
        else:
            _sgemv(_ROW_MAJOR, _NO_TRANS, cols, k, float32(1), pb, ldb, pa,
                   a.strides[3] // 4, beta, pc, out.strides[3] // 4)
    elif n == 1:    # out column = a b column
        if trans_a == _NO_TRANS:
            _sgemv(_ROW_MAJOR, _NO_TRANS, rows, k, float32(1), pa, lda, pb, b.strides[2] // 4,
                   beta, pc, out.strides[2] // 4)
        else:
            _sgemv(_ROW_MAJOR, _TRANS, k, rows, float32(1), pa, lda, pb, b.strides[2] // 4,
                   beta, pc, out.strides[2] // 4)
    else:
        _sgemm(_ROW_MAJOR, trans_a, trans_b, rows, cols, k, float32(1), pa, lda, pb, ldb,
               beta, pc, ldc)


@njit(cache=True, nogil=True, parallel=True)
def _gemm(a, b, out, beta, workers):
    """out = a @ b + beta out for 4-d float32 arrays (see ``_block``); False where BLAS cannot
    read them. Small products run on this thread; larger ones in blocks that numba's threads
    take from a shared counter until none is left."""
    m, n, k = out.shape[2], out.shape[3], a.shape[3]
    trans_a, lda = _layout(m, k, a.strides[2], a.strides[3])
    trans_b, ldb = _layout(k, n, b.strides[2], b.strides[3])
    trans_c, ldc = _layout(m, n, out.strides[2], out.strides[3])
    if lda == 0 or ldb == 0 or trans_c != _NO_TRANS:
        return False
    products = out.shape[0] * out.shape[1]
    beta32 = float32(beta)
    if not _spreads(m, n, k, products, workers):
        for j in range(products):
            _block(j, a, b, out, beta32, m, n, trans_a, lda, trans_b, ldb, ldc)
        return True
    block_m, block_n = _blocks(m, n, k, products, workers)
    total = products * _ceil(m, block_m) * _ceil(n, block_n)
    counter = np.zeros(1, np.int64)
    for _ in prange(workers):
        j = _fetch_add(counter, 0, 1)
        while j < total:
            _block(j, a, b, out, beta32, block_m, block_n, trans_a, lda, trans_b, ldb, ldc)
            j = _fetch_add(counter, 0, 1)
    return True


def _four_d(x):
    return x.reshape((1,) * (4 - x.ndim) + x.shape) if x.ndim < 4 else x


def _run(a, b, out, beta, name):
    lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if (a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]
            or out.shape != lead + (a.shape[-2], b.shape[-1])):
        raise ValueError(f"{name}: shapes {a.shape} @ {b.shape} do not give {out.shape}")
    if (out.ndim > 4 or any(x.dtype != _FLOAT32 for x in (a, b, out))
            or not out.flags.writeable):
        return False
    if out.size == 0:
        return True
    if a.shape[-1] == 0:
        if beta == 0:
            out[...] = 0
        return True
    return _gemm(_four_d(a), _four_d(b), _four_d(out), beta, numba.get_num_threads())


def matmul(a, b, out):
    """``np.matmul(a, b, out=out)`` for float32 matrices or stacks of them (leading axes
    broadcast, at most two), on the private OpenBLAS across numba's threads (the module
    docstring); other operands go to ``np.matmul``."""
    if not _run(a, b, out, 0, "matmul"):
        np.matmul(a, b, out=out)


def accumulate(a, b, out):
    """``out += a @ b`` for float32 matrices or stacks, as one BLAS product with beta = 1
    (``out`` read and written once, no temporary). Returns False, and leaves ``out`` alone,
    where BLAS cannot take the operands; the caller then computes it otherwise."""
    return _run(a, b, out, 1, "accumulate")
