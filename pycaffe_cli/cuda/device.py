"""Compile a plain-Python per-element body as a numba.cuda device function.

Kernel bodies are written once as plain Python (``*_py`` functions, see DESIGN.md rule 4):
``njit`` compiles them for a CPU ``prange`` driver, ``device_function`` for a ``cuda.jit``
grid-stride loop. The one thing the two targets disagree on is the builtin ``min``/``max``:
since numba 0.66 the CUDA target fails to compile two-argument ``min(a, b)`` ("Signature
mismatch: 2 argument types given, but function takes 1 arguments", numba issue #10753), so
the body is compiled with ``min`` and ``max`` bound to two-argument device functions with
Python's semantics (the first argument wins ties; NaN handling as Python's).
"""
import types

from numba import cuda


@cuda.jit(device=True)
def _min2(a, b):
    return b if b < a else a


@cuda.jit(device=True)
def _max2(a, b):
    return b if b > a else a


@cuda.jit(device=True)
def split_index(index, rows, cols):
    """(plane, row, column) of a flat index into (planes, rows, cols): the element a
    grid-stride thread of a (..., rows, cols) array works on."""
    return index // (rows * cols), (index // cols) % rows, index % cols


def device_function(pyfunc, **bindings):
    """``cuda.jit(device=True)`` of ``pyfunc`` with builtin ``min``/``max`` replaced (see the
    module doc) and any other global names rebound by ``bindings`` (e.g. a plain helper the
    body calls, bound to its device version)."""
    namespace = dict(pyfunc.__globals__, min=_min2, max=_max2, **bindings)
    body = types.FunctionType(pyfunc.__code__, namespace, pyfunc.__name__,
                              pyfunc.__defaults__, pyfunc.__closure__)
    body.__doc__ = pyfunc.__doc__
    return cuda.jit(device=True)(body)
