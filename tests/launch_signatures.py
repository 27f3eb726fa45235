"""The argument types of every CUDA kernel launch the simulated tests make must be among the
signatures the PTX check compiles (``tests/kernels/cuda/ptx_*.py``).

numba compiles a kernel for the types it is launched with, so a launch with other types
(a Python float where the check passed float32, say) runs code on a real GPU that nothing
here has compiled or checked for float64 arithmetic. conftest.py records the launches and
fails the session, listing them, when any is undeclared. Array layouts are not compared:
numba compiles the same code for a contiguous array as for an any-layout one.
"""
import importlib
import pathlib
from collections import defaultdict

from numba import typeof, types

PTX_MODULES = sorted(path.stem for path in
                     (pathlib.Path(__file__).parent / "kernels" / "cuda").glob("ptx_*.py"))
_launched = defaultdict(set)  # the kernel's Python function -> argument type tuples


def start_recording():
    """Record the argument types of every launch of a simulated kernel from now on."""
    from numba.cuda.simulator import kernel as simulated

    run = simulated.FakeCUDAKernel.__call__

    def recording_run(self, *args):
        if not self._device:
            _launched[self.fn].add(tuple(_any_layout(_argument_type(a)) for a in args))
        return run(self, *args)

    simulated.FakeCUDAKernel.__call__ = recording_run


def undeclared():
    """"module.kernel(types)" for each recorded launch signature the PTX check lacks."""
    declared = defaultdict(set)
    for name in PTX_MODULES:
        module = importlib.import_module(f"tests.kernels.cuda.{name}")
        for kernel, signatures in module.KERNELS:
            for signature in signatures:
                declared[kernel.py_func].add(tuple(_any_layout(t) for t in signature))
    return sorted(f"{function.__module__}.{function.__name__}{signature}"
                  for function, signatures in _launched.items()
                  for signature in signatures - declared[function])


def _argument_type(arg):
    return typeof(getattr(arg, "_ary", arg))  # a simulator device array wraps a numpy one


def _any_layout(numba_type):
    if isinstance(numba_type, types.Array):
        return types.Array(numba_type.dtype, numba_type.ndim, "A")
    return numba_type
