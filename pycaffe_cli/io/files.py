"""Crash-safe file writing.

Every file pycaffe writes (snapshots, weights, prototxts, mean files) goes through
``atomic_write`` or ``atomic_output_path``: the bytes go to a temporary file in the target's
folder, are flushed and fsynced, and only then ``os.replace`` puts the file in place. A run
killed half way leaves either the old file or the new one, never a torn mix. A writer that
keeps its file open for a whole run (HDF5Output) gets a new file renamed into place at once
(``open_new_in_place``).

Only a regular file (or a link to one: ``os.replace`` replaces the link, never its target) is
ever replaced: a folder, a named pipe, a socket or a device at the target (``/dev/null``,
which root could otherwise turn into a plain file) is refused before anything is written.
The temporary file is created exclusively (``mkstemp``), so it is never an existing file.
"""
import contextlib
import os
import tempfile

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.input_files import kind_problem, path_problem, read_input_bytes, shown


def _current_umask():
    """The process umask, read without changing it where the platform allows."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _final_mode(path):
    """The permission bits a plain ``open(path, "w")`` would have given the file."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        return 0o666 & ~_current_umask()


def _fsync_folder(folder):
    """Make the rename itself durable (best effort: not every filesystem allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _cannot_write(path, error):
    reason = error.strerror or str(error)
    return CaffeError(f"cannot write '{path}': {reason}")


def output_problem(path):
    """Why a writer must not replace what stands at ``path``, or None when it may: nothing
    there (a dangling link included), a regular file, or a link to one."""
    problem = path_problem(path)
    if problem:
        return problem
    try:
        info = os.stat(path)
    except OSError:     # nothing there, or nothing stat can see: the write itself reports it
        return None
    return kind_problem(info.st_mode)


def check_output_target(path):
    """Raise ``CaffeError("cannot write 'path': <reason>")`` unless a writer may replace what
    stands at ``path`` (see ``output_problem``)."""
    problem = output_problem(path)
    if problem:
        raise CaffeError(f"cannot write '{shown(path)}': {problem}")


def _temporary_beside(path):
    """Create an empty temporary file in ``path``'s folder; return (fd, temp path)."""
    check_output_target(path)
    folder = os.path.dirname(os.path.abspath(path))
    prefix = "." + os.path.basename(path) + "."
    try:
        return tempfile.mkstemp(prefix=prefix, suffix=".part", dir=folder)
    except OSError as error:
        raise _cannot_write(path, error) from None


def _commit(temp_path, path):
    """Give the finished temporary file its final permissions and name."""
    check_output_target(path)     # again: something else may have appeared there meanwhile
    try:
        os.chmod(temp_path, _final_mode(path))
        os.replace(temp_path, path)
    except OSError as error:
        raise _cannot_write(path, error) from None
    _fsync_folder(os.path.dirname(os.path.abspath(path)))


def _discard(temp_path):
    with contextlib.suppress(OSError):
        os.unlink(temp_path)


@contextlib.contextmanager
def atomic_write(path, mode="wb", encoding=None):
    """Open a stream whose contents replace ``path`` only when the block ends without error.

    Args:
        path: the file to (re)write.
        mode: "wb" (default) or "w" for text; "w+b" when the writer also reads back.
        encoding: text encoding for "w" (UTF-8 by default).

    Yields:
        The open stream. On an exception the temporary file is removed and ``path`` is left
        as it was.

    Raises:
        CaffeError: the folder is missing or not writable, or the disk is full (an OSError
        raised by the block's writes is turned into one naming ``path``).
    """
    if "w" not in mode:
        raise ValueError(f"atomic_write needs a write mode, got {mode!r}")
    if "b" not in mode and encoding is None:
        encoding = "utf-8"
    fd, temp_path = _temporary_beside(path)
    try:
        with os.fdopen(fd, mode, encoding=encoding) as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        _commit(temp_path, path)
    except OSError as error:   # the writer's own write, flush or close: disk full, I/O error
        _discard(temp_path)
        raise _cannot_write(path, error) from None
    except BaseException:
        _discard(temp_path)
        raise


@contextlib.contextmanager
def atomic_output_path(path):
    """Yield a temporary path for writers that need a file name rather than a stream (h5py).

    The writer must have closed the file when the block ends; the file is then fsynced and
    renamed onto ``path``. On an exception it is removed and ``path`` is left as it was; an
    OSError (disk full, I/O error) becomes a CaffeError naming ``path``. HDF5 writers should
    prefer ``hdf5_image.write_hdf5_atomically``: the HDF5 library can crash the process
    when the disk fills up under it.
    """
    fd, temp_path = _temporary_beside(path)
    os.close(fd)
    try:
        yield temp_path
        fd = os.open(temp_path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _commit(temp_path, path)
    except OSError as error:   # h5py reports a failed write as OSError too
        _discard(temp_path)
        raise _cannot_write(path, error) from None
    except BaseException:
        _discard(temp_path)
        raise


def open_new_in_place(path, opener):
    """For a writer that keeps its file open and appends to it (HDF5Output): make a new,
    empty file exclusively beside ``path``, open it with ``opener(temp_path)`` and rename it
    onto ``path`` at once. Nothing that stood at ``path`` is followed or truncated (a link is
    replaced, not its target). Returns what ``opener`` returned.

    Raises:
        CaffeError: ``path`` is not a regular file, or cannot be written.
    """
    fd, temp_path = _temporary_beside(path)
    os.close(fd)
    handle = None
    try:
        handle = opener(temp_path)
        _commit(temp_path, path)
    except BaseException as error:
        if handle is not None:
            handle.close()
        _discard(temp_path)
        if isinstance(error, OSError):
            raise _cannot_write(path, error) from None
        raise
    return handle


def read_bytes(path, what, limit=None):
    """Read a whole regular file, turning problems into ``cannot read <what> 'path': reason``
    (see ``input_files.read_input_bytes``: pipes and devices are refused unopened; ``limit``
    is an ``input_files.SizeLimit`` or None)."""
    return read_input_bytes(path, what, limit)
