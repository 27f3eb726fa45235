"""Device memory for blobs: allocation, zero fill, pinned host buffers, streams.

Every device array pycaffe makes is a numba.cuda device array (a simulator array under
NUMBA_ENABLE_CUDASIM=1), flat and float32 unless asked otherwise. CuPy, when installed, only
ever *views* these arrays (through the CUDA array interface) to hand them to cuBLAS. This
module defines no kernel (see pycaffe_cli/cuda/fill.py for why).
"""
import numpy as np
from numba import cuda

from pycaffe_cli.cuda.fill import fill  # noqa: F401 (memory.fill: caffe_gpu_set)


def empty(count, dtype=np.float32):
    """An uninitialised flat device array of ``count`` elements.

    Raises:
        MemoryError: the device has not that much memory free (numba raises a CudaAPIError
            with CUDA_ERROR_OUT_OF_MEMORY; the layer that asked turns it into one line).
    """
    try:
        return cuda.device_array(int(count), dtype)
    except Exception as error:
        if not _out_of_memory(error):
            raise
        size = int(count) * np.dtype(dtype).itemsize
        raise MemoryError(f"out of GPU memory allocating {size / (1 << 20):.1f} MiB") from None


def _out_of_memory(error):
    """Whether a numba CUDA driver error is CUDA_ERROR_OUT_OF_MEMORY (code 2)."""
    if type(error).__name__ == "CudaAPIError" and getattr(error, "code", None) == 2:
        return True
    return "OUT_OF_MEMORY" in str(error)


def zeros(count, dtype=np.float32):
    """A flat device array of ``count`` zeros."""
    out = empty(count, dtype)
    fill(out, 0)
    return out


def pinned_empty(count, dtype=np.float32):
    """A page-locked host array (fast, asynchronous host -> device copies)."""
    return cuda.pinned_array(int(count), dtype)


def use_device(device_id):
    """Make ``device_id`` current for the calling thread (each thread has its own CUDA
    context stack; a prefetch thread would otherwise work on device 0)."""
    cuda.select_device(device_id)


def stream():
    """A new CUDA stream (for copies that overlap compute)."""
    return cuda.stream()


def synchronize():
    """Wait for all work queued on the current device."""
    cuda.synchronize()


def copy(source, destination):
    """Device -> device copy of equal-sized flat arrays (caffe_copy on the GPU)."""
    if source.size:
        destination.copy_to_device(source)
