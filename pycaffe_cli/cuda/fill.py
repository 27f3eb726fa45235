"""caffe_gpu_set: one value into every element of a flat device array.

The kernel lives apart from pycaffe_cli/cuda/memory.py on purpose: numba's CUDA simulator
swaps the ``cuda`` global of a kernel's module while the kernel runs, and memory's host
functions (``use_device``, ``empty``, ...) also run on the data prefetch thread, which then
met the simulator's stand-in instead of numba.cuda. A module with no kernel keeps its globals.
"""
from numba import cuda

from pycaffe_cli.cuda.launch import launch


@cuda.jit(cache=True)
def _fill_kernel(n, value, out):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        out[index] = value


def fill(out, value):
    """Set every element of the flat device array ``out`` to ``value`` (caffe_gpu_set)."""
    launch(_fill_kernel, out.size, out.dtype.type(value), out)
