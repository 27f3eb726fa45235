"""Reading HDF5 files that may be damaged.

The HDF5 library reports a damaged file (a flipped bit in a B-tree node or a local heap, a
truncated file) as whatever Python exception h5py maps its error stack to: OSError,
RuntimeError ("Link iteration failed (...)"), KeyError, ValueError ("Insufficient precision
..."), TypeError. The readers of users' files (weights, HDF5Data sources) catch exactly these,
``H5PY_ERRORS``, around their h5py calls and report one line naming the file and what they
were reading. ``read_float32`` also refuses a dataset whose (perhaps damaged) shape needs more
than the machine's memory before h5py allocates it.
"""
import numpy as np

from pycaffe_cli.sizes import check_bytes

H5PY_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError)


def h5py_detail(error):
    """h5py's message on one line (the exception's name when it has none)."""
    text = error.args[0] if isinstance(error, KeyError) and error.args else error  # unquoted
    return " ".join(str(text).split()) or type(error).__name__


def read_float32(dataset, what):
    """The whole of an h5py dataset as a C-contiguous float32 array.

    Raises:
        AllocationError: the dataset needs more memory than the machine has (``what``
            names it).
        one of H5PY_ERRORS: h5py could not read it.
    """
    check_bytes(dataset.size * max(dataset.dtype.itemsize, 4), what)
    return np.ascontiguousarray(dataset[()], dtype=np.float32)
