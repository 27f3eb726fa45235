"""Two things numpy's matmul lacks, from numpy's own OpenBLAS: GEMM with accumulation, and a
batch of small GEMMs over every core.

``accumulate(a, b, out)`` is BLAS's ``out = a b + out`` (beta = 1, as Caffe's weight gradients
use it), called through ctypes. ``out += a @ b`` in numpy writes the product to a temporary,
which OpenBLAS first zeroes (its beta = 0 pass), then reads it back: for CaffeNet's fc6 weight
gradient (151 MB) 20 ms in row blocks against 12.5 ms for the one call, which reads and writes
``out`` once (copying those 151 MB takes 11.4 ms here). Where ``out`` starts at zero (the
solver clears gradients each iteration) the result is numpy's product bit for bit: the same
kernel sums the same terms into zero.

``matmul_spread`` runs one single-threaded BLAS call per item, in threads.

OpenBLAS threads each GEMM, but a GEMM of a few MFLOP (the 36 products of a Winograd layer:
(out_channels x channels) @ (channels x tiles)) gains little from a second thread and pays
for waking it: on the 2-core machine GoogLeNet's conv2/3x3 at batch 1 ran its 36 products
at 87 GFLOP/s with two threads and with one. ``matmul_spread`` sets numpy's OpenBLAS to one
thread for the call and runs slices of the batch in that many Python threads (numpy releases
the GIL inside BLAS): 1.45 instead of 2.2 ms there, 5.7 instead of 6.9 ms for 128 -> 192
channels at 28x28, batch 10. Each product is computed by the same single-threaded kernel as
before, so the results do not depend on the split.

Where numpy's BLAS is not an OpenBLAS bundled with numpy whose thread count can be set
(another BLAS, a numpy built against a system BLAS), ``matmul_spread`` is ``np.matmul``.
"""
import ctypes
import glob
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

# (set, get) symbol names of OpenBLAS's thread count: numpy's wheels (scipy-openblas, ILP64
# and LP64 builds), then a plain OpenBLAS.
_SYMBOLS = (("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
            ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
            ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
            ("openblas_set_num_threads", "openblas_get_num_threads"))

# Products smaller than this (FLOPs in the whole batch) run as one np.matmul: handing half
# the batch to another thread costs ~50 us, and OpenBLAS already runs such small products on
# one thread. Measured on Winograd batches (36 products), np.matmul / spread, ms: 10.6 MFLOP
# 0.098 / 0.128, 14.5 MFLOP 0.154 / 0.166, 18.9 MFLOP 0.182 / 0.182, 43 MFLOP 0.40 / 0.32,
# 87 MFLOP 1.39 / 0.58, 173 MFLOP 2.02 / 1.03.
SPREAD_MIN_FLOPS = 1 << 25

# cblas_sgemm of numpy's wheels (ILP64, then LP64 builds) and the integer type it takes.
_SGEMM_SYMBOLS = (("scipy_cblas_sgemm64_", ctypes.c_int64), ("scipy_cblas_sgemm", ctypes.c_int32),
                  ("cblas_sgemm64_", ctypes.c_int64))
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_FLOAT32 = np.dtype(np.float32)

_lock = threading.Lock()
_state = {}


def _numpy_openblas():
    """Paths of the OpenBLAS libraries numpy's wheels bundle. Only numpy's own folders: other
    packages bring their own OpenBLAS (OpenCV's wheel does), and setting the thread count of
    one of those would leave numpy's BLAS threaded under our threads."""
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


def _thread_controls():
    """(set_num_threads, get_num_threads) of numpy's OpenBLAS, or None."""
    if "controls" not in _state:
        _state["controls"] = None
        for library in _libraries():
            for set_name, get_name in _SYMBOLS:
                if hasattr(library, set_name) and hasattr(library, get_name):
                    setter, getter = getattr(library, set_name), getattr(library, get_name)
                    setter.restype, getter.restype = None, ctypes.c_int
                    _state["controls"] = (setter, getter)
                    return _state["controls"]
    return _state["controls"]


def _pool(workers):
    """A pool of at least ``workers`` threads, kept for later calls."""
    if _state.get("workers", 0) < workers:
        _state["pool"] = ThreadPoolExecutor(workers, thread_name_prefix="pycaffe-blas")
        _state["workers"] = workers
    return _state["pool"]


def matmul_spread(a, b, out):
    """``np.matmul(a, b, out=out)`` for 3-d arrays (a batch of products), the batch split
    over as many threads as OpenBLAS would use, each product on one thread, where the batch
    has at least SPREAD_MIN_FLOPS."""
    controls = _thread_controls() if 2 * out.size * a.shape[-1] >= SPREAD_MIN_FLOPS else None
    threads = controls[1]() if controls is not None else 1
    parts = min(threads, len(out))
    if parts < 2:
        np.matmul(a, b, out=out)
        return
    bounds = [len(out) * k // parts for k in range(parts + 1)]
    with _lock:  # one spread at a time: each sets the thread count back when it ends
        controls[0](1)
        jobs = []
        try:
            jobs = [_pool(parts - 1).submit(np.matmul, a[lo:hi], b[lo:hi], out=out[lo:hi])
                    for lo, hi in zip(bounds[1:-1], bounds[2:])]
            np.matmul(a[:bounds[1]], b[:bounds[1]], out=out[:bounds[1]])
        finally:
            errors = [job.exception() for job in jobs]  # waits for every part
            controls[0](threads)
        for error in errors:
            if error is not None:
                raise error
