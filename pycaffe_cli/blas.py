"""Two things numpy's matmul lacks: GEMM with accumulation, and a batch of small GEMMs over
every core.

``accumulate(a, b, out)`` is BLAS's ``out = a b + out`` (beta = 1, as Caffe's weight gradients
use it), called through ctypes on numpy's own OpenBLAS. ``out += a @ b`` in numpy writes the
product to a temporary, which OpenBLAS first zeroes (its beta = 0 pass), then reads it back:
for CaffeNet's fc6 weight gradient (151 MB) that reads and writes ``out`` twice as often.

``matmul_batch(a, b, out)`` is ``np.matmul`` of 3-d arrays (Winograd's 36 products, (out
channels x channels) @ (channels x tiles)): the products go to numba's threads, one product
per thread at a time, each computed by a private, single-threaded OpenBLAS (the
scipy-openblas32 wheel, loaded here and used by nothing else). numpy's OpenBLAS would thread
each small product and pay for waking its threads every time; a batch spread over numba's
threads takes less time (docs/kernel-choices.md, "Batches of small GEMMs"). No thread count
is ever changed: numpy's OpenBLAS keeps its settings for every other caller (prefetch
threads, Python layers, a user's own code), and the private one runs on one thread from the
moment it is loaded.
"""
import ctypes
import glob
import os

import llvmlite.binding
import numpy as np
import scipy_openblas32
from numba import float32, njit, prange, types

# cblas_sgemm of numpy's wheels (ILP64, then LP64 builds) and the integer type it takes.
_SGEMM_SYMBOLS = (("scipy_cblas_sgemm64_", ctypes.c_int64), ("scipy_cblas_sgemm", ctypes.c_int32),
                  ("cblas_sgemm64_", ctypes.c_int64))
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_FLOAT32 = np.dtype(np.float32)

_state = {}


def _numpy_openblas():
    """Paths of the OpenBLAS libraries numpy's wheels bundle: only numpy's own folders (other
    packages bring an OpenBLAS of their own, OpenCV's wheel does), so that ``accumulate``
    uses the library, threads and settings numpy's products use."""
    numpy_dir = os.path.dirname(np.__file__)
    paths = []
    for folder in (os.path.join(os.path.dirname(numpy_dir), "numpy.libs"),
                   os.path.join(numpy_dir, ".dylibs")):
        paths += sorted(glob.glob(os.path.join(folder, "*openblas*")))
    return [path for path in paths if os.path.isfile(path)]


def _libraries():
    """numpy's OpenBLAS libraries, loaded (each once)."""
    if "libraries" not in _state:
        _state["libraries"] = []
        for path in _numpy_openblas():
            try:
                _state["libraries"].append(ctypes.CDLL(path))
            except OSError:
                continue
    return _state["libraries"]


def _sgemm():
    """(cblas_sgemm, its integer type) of numpy's OpenBLAS, or None."""
    if "sgemm" not in _state:
        _state["sgemm"] = None
        for library in _libraries():
            for name, integer in _SGEMM_SYMBOLS:
                if hasattr(library, name):
                    function = getattr(library, name)
                    function.restype = None
                    function.argtypes = [ctypes.c_int] * 3 + [integer] * 3 + [
                        ctypes.c_float, ctypes.c_void_p, integer, ctypes.c_void_p, integer,
                        ctypes.c_float, ctypes.c_void_p, integer]
                    _state["sgemm"] = (function, integer)
                    return _state["sgemm"]
    return _state["sgemm"]


def _operand(x):
    """(transposed, leading dimension) that describe the float32 matrix ``x`` to BLAS
    (row-major), or None where its strides fit neither way."""
    rows, cols = x.shape
    unit = _FLOAT32.itemsize
    row_step, col_step = x.strides
    if (cols == 1 or col_step == unit) and (rows == 1 or (
            row_step % unit == 0 and row_step // unit >= cols)):
        return False, max(cols, 1, row_step // unit if rows > 1 else 0)
    if (rows == 1 or row_step == unit) and (cols == 1 or (
            col_step % unit == 0 and col_step // unit >= rows)):
        return True, max(rows, 1, col_step // unit if cols > 1 else 0)
    return None


def accumulate(a, b, out):
    """``out += a @ b`` as one BLAS call with beta = 1, for 2-d float32 arrays (``out``
    row-major). Returns False, and leaves ``out`` alone, where numpy's OpenBLAS cannot be
    called or an operand's strides do not suit it; the caller then computes it otherwise."""
    sgemm = _sgemm()
    if sgemm is None or not all(x.ndim == 2 and x.dtype == _FLOAT32 for x in (a, b, out)):
        return False
    (rows, depth), cols = a.shape, b.shape[1]
    if b.shape[0] != depth or out.shape != (rows, cols):
        raise ValueError(f"accumulate: shapes {a.shape} @ {b.shape} do not give {out.shape}")
    if rows == 0 or cols == 0 or depth == 0:
        return True
    layouts = [_operand(x) for x in (a, b, out)]
    if None in layouts or layouts[2][0] or not out.flags.writeable:
        return False
    function, integer = sgemm
    (trans_a, lda), (trans_b, ldb), (_, ldc) = layouts
    function(_ROW_MAJOR, _TRANS if trans_a else _NO_TRANS, _TRANS if trans_b else _NO_TRANS,
             integer(rows), integer(cols), integer(depth), 1.0, a.ctypes.data, integer(lda),
             b.ctypes.data, integer(ldb), 1.0, out.ctypes.data, integer(ldc))
    return True


# --- the private OpenBLAS -----------------------------------------------------------------
# Batches of fewer FLOPs than this run their products in turn on the calling thread: starting
# numba's threads costs more than such a batch takes (docs/kernel-choices.md, "Batches of
# small GEMMs").
BATCH_PARALLEL_MIN_FLOPS = 1 << 25
# The symbol numba-compiled code calls the private cblas_sgemm by (resolved when this module
# is imported, so kernels cached on disk find it too).
_PRIVATE_SGEMM = "pycaffe_private_cblas_sgemm"


def _load_private_openblas():
    """Load scipy-openblas32's library, set it to one thread (nothing else in the process
    uses it), and make its cblas_sgemm callable from numba code by name."""
    folder = scipy_openblas32.get_lib_dir()
    names = sorted(name for name in os.listdir(folder) if name.startswith("libscipy_openblas")
                   and name.endswith((".so", ".dylib", ".dll")))
    library = ctypes.CDLL(os.path.join(folder, names[0]))
    library.scipy_openblas_set_num_threads(1)
    address = ctypes.cast(library.scipy_cblas_sgemm, ctypes.c_void_p).value
    llvmlite.binding.add_symbol(_PRIVATE_SGEMM, address)
    return library


_PRIVATE = _load_private_openblas()
# cblas_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), with
# the pointers passed as pointer-sized integers (the same registers in the C calling
# convention) so that arrays' ``ctypes.data`` can be handed over.
_int, _pointer = types.int32, types.intp
_private_sgemm = types.ExternalFunction(_PRIVATE_SGEMM, types.void(
    _int, _int, _int, _int, _int, _int, types.float32, _pointer, _int, _pointer, _int,
    types.float32, _pointer, _int))


@njit(cache=True, nogil=True)
def _product(a, b, out):
    """out = a @ b (2-d, C-contiguous float32) on the private OpenBLAS, this thread only."""
    rows, depth = a.shape
    cols = b.shape[1]
    _private_sgemm(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, rows, cols, depth, float32(1),
                   a.ctypes.data, depth, b.ctypes.data, cols, float32(0), out.ctypes.data,
                   cols)


@njit(cache=True, parallel=True, nogil=True)
def _batch(a, b, out, parallel):
    if parallel:
        for i in prange(out.shape[0]):
            _product(a[i], b[i], out[i])
    else:
        for i in range(out.shape[0]):
            _product(a[i], b[i], out[i])


def matmul_batch(a, b, out):
    """``np.matmul(a, b, out=out)`` for C-contiguous 3-d float32 arrays, each product on one
    of numba's threads (see the module docstring)."""
    count, rows, depth = a.shape
    if b.shape != (count, depth, out.shape[2]) or out.shape[:2] != (count, rows):
        raise ValueError(f"matmul_batch: shapes {a.shape} @ {b.shape} do not give {out.shape}")
    if not all(x.dtype == _FLOAT32 and x.flags.c_contiguous for x in (a, b, out)):
        np.matmul(a, b, out=out)
        return
    if depth == 0:
        out[...] = 0
        return
    _batch(a, b, out, 2 * out.size * depth >= BATCH_PARALLEL_MIN_FLOPS)
