"""Write HDF5 files through memory, so a full disk is a clean error and not a crash.

Writing an HDF5 file straight to a disk that fills up makes the HDF5 library fail inside
h5py's object destructors: the errors are printed as ignored exceptions, the temporary file
stays behind, and the process can end with a segmentation fault. So pycaffe builds the
whole file in memory (HDF5's "core" driver without a backing store) and hands the finished
image to ``atomic_write``, whose plain Python writes report ENOSPC as one CaffeError.
"""
import contextlib
import itertools

from pycaffe_cli.io.files import atomic_write, check_output_target

_NAMES = itertools.count()


@contextlib.contextmanager
def in_memory_hdf5():
    """Yield a writable ``h5py.File`` that lives only in memory.

    Read the finished file's bytes with ``hdf5_bytes(handle)`` before the block ends.
    """
    import h5py
    # HDF5 refuses to open one name twice, even for files that never reach the disk.
    name = f"pycaffe-in-memory-{next(_NAMES)}.h5"
    handle = h5py.File(name, "w", driver="core", backing_store=False)
    try:
        yield handle
    finally:
        handle.close()


def hdf5_bytes(handle):
    """The complete file image of an open in-memory ``h5py.File``."""
    handle.flush()
    return handle.id.get_file_image()


def write_hdf5_atomically(path, fill):
    """Build an HDF5 file in memory with ``fill(handle)``, then write it to ``path``.

    Args:
        path: the .h5 file to (re)write; it is replaced only when the whole file is written.
        fill: a function that writes the groups and datasets into the open ``h5py.File``.

    Returns:
        The bytes written.

    Raises:
        CaffeError: ``path`` cannot be written (missing folder, no permission, disk full);
        the earlier file at ``path``, if any, is left as it was and no temporary file stays.
        Also when ``path`` is not a regular file (a folder, a pipe, a device): checked
        before the file is built.
    """
    check_output_target(path)
    with in_memory_hdf5() as handle:
        fill(handle)
        image = hdf5_bytes(handle)
    with atomic_write(path, "wb") as stream:
        stream.write(image)
    return image
