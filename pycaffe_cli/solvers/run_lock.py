"""One training run per snapshot prefix, and no temporary files left from a killed one.

``pycaffe train`` holds an exclusive ``flock`` on ``<snapshot_prefix>.lock`` while it runs,
so a second run on the same prefix stops at once with the first one's pid instead of
writing snapshots into the same names. The kernel drops the lock when its holder dies, so a
lock file left by a killed run (kill -9, power loss) is simply taken over. Once the lock is
held, the temporary files (``.<snapshot name>.*.part``) that a killed run left beside its
snapshots are removed.

A snapshot folder may be shared (``/tmp``), so the lock file is written only when it is this
user's own regular file with no other name: a symbolic link (opened with O_NOFOLLOW where the
platform has it), a hard link, a pipe, a device or another user's file at the lock's path is
refused, never truncated.
"""
import contextlib
import errno
import os
import re
import stat

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.input_files import kind_problem
from pycaffe_cli.log import LOG

try:
    import fcntl
except ImportError:     # Windows: no flock; runs are not guarded there
    fcntl = None

LOCK_SUFFIX = ".lock"
_OPEN_FLAGS = (os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
               | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
_SNAPSHOT_FILE = r"_iter_\d+\.(?:caffemodel|solverstate)(?:\.h5)?(?:\.pycaffe\.json)?"


def lock_path(prefix):
    """The lock file of a snapshot prefix."""
    return prefix + LOCK_SUFFIX


def _holder(fd):
    """The pid written in the open lock file, or "unknown"."""
    with contextlib.suppress(OSError, ValueError):
        return str(int(os.pread(fd, 32, 0).decode("ascii").strip()))
    return "unknown"


def _refused(path, why):
    return CaffeError(f"lock file '{path}' {why}; pycaffe locks a snapshot prefix only with a "
                      "regular file of its own: remove it, or give this run another "
                      "snapshot_prefix")


def _lock_file_problem(info):
    """Why the file ``info`` (an lstat or fstat result) may not serve as our lock, or None."""
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    problem = kind_problem(info.st_mode)
    if problem:     # "Is a named pipe (FIFO), not a regular file"
        return problem[0].lower() + problem[1:]
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        return f"belongs to another user (uid {info.st_uid})"
    if info.st_nlink > 1:
        return f"has {info.st_nlink} names (hard links)"
    return None


def _check_lock_file(path, info):
    problem = _lock_file_problem(info)
    if problem:
        raise _refused(path, problem)


def _open_lock_file(path):
    """Open our own lock file at ``path`` (created if absent) without following a link;
    None when it cannot be created (no folder, read-only): no lock where no snapshot can
    be written either."""
    with contextlib.suppress(OSError):
        _check_lock_file(path, os.lstat(path))      # a clear message before opening
    try:
        fd = os.open(path, _OPEN_FLAGS, 0o644)
    except OSError as error:
        if os.path.islink(path):   # ELOOP from O_NOFOLLOW: a link appeared after lstat
            raise _refused(path, "is a symbolic link") from None
        if os.path.lexists(path) and error.errno in (errno.EACCES, errno.EPERM):
            raise _refused(path, f"cannot be opened ({error.strerror})") from None
        return None
    except ValueError:
        return None
    try:
        _check_lock_file(path, os.fstat(fd))        # what was really opened
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_locked(path):
    """Open and flock ``path``; None when it cannot be created; CaffeError when held."""
    while True:
        fd = _open_lock_file(path)
        if fd is None:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise CaffeError(f"snapshot prefix '{path[:-len(LOCK_SUFFIX)]}' is in use by "
                             f"another pycaffe run (pid {holder}, lock file '{path}'); "
                             "wait for it to end or give this run another snapshot_prefix"
                             ) from None
        except OSError:     # a filesystem without locks
            os.close(fd)
            return None
        # The previous holder removes the file as it lets go: lock the file now at ``path``.
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(fd), os.lstat(path)):
                return fd
        os.close(fd)


def _release(fd, path):
    with contextlib.suppress(OSError):
        os.remove(path)
    os.close(fd)


def remove_stale_temporaries(prefix):
    """Remove the ``.part`` files an interrupted run left for this prefix's snapshots."""
    folder = os.path.dirname(prefix) or "."
    pattern = re.compile(r"\." + re.escape(os.path.basename(prefix)) + _SNAPSHOT_FILE
                         + r"\.\w+\.part")
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            if pattern.fullmatch(name):
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(folder, name))
                    LOG.info(f"Removed {os.path.join(folder, name)}, a temporary file left by "
                             "an interrupted run")


@contextlib.contextmanager
def snapshot_prefix_lock(prefix):
    """Hold ``<prefix>.lock`` for the block and clean up stale temporary files first.

    Args:
        prefix: the solver's (completed) snapshot_prefix; "" means no lock.

    Raises:
        CaffeError: another live process holds the lock (the message gives its pid), or
        the lock's path is not this user's own regular file (a link, a pipe, another user's
        file): nothing is written to it then.
    """
    if not prefix or fcntl is None:
        yield
        return
    path = lock_path(prefix)
    fd = _open_locked(path)
    if fd is None:
        yield
        return
    try:
        with contextlib.suppress(OSError):     # the pid only informs a second run's error
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        remove_stale_temporaries(prefix)
        yield
    finally:
        _release(fd, path)
