"""One training run per snapshot prefix, and no temporary files left from a killed one.

``pycaffe train`` holds an exclusive ``flock`` on ``<snapshot_prefix>.lock`` while it runs,
so a second run on the same prefix stops at once with the first one's pid instead of
writing snapshots into the same names. The kernel drops the lock when its holder dies, so a
lock file left by a killed run (kill -9, power loss) is simply taken over. Once the lock is
held, the temporary files (``.<snapshot name>.*.part``) that a killed run left beside its
snapshots are removed.
"""
import contextlib
import os
import re

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG

try:
    import fcntl
except ImportError:     # Windows: no flock; runs are not guarded there
    fcntl = None

LOCK_SUFFIX = ".lock"
_SNAPSHOT_FILE = r"_iter_\d+\.(?:caffemodel|solverstate)(?:\.h5)?(?:\.pycaffe\.json)?"


def lock_path(prefix):
    """The lock file of a snapshot prefix."""
    return prefix + LOCK_SUFFIX


def _holder(path):
    """The pid written in a lock file, or "unknown"."""
    with contextlib.suppress(OSError, ValueError):
        with open(path, encoding="ascii") as stream:
            return str(int(stream.read().strip()))
    return "unknown"


def _open_locked(path):
    """Open and flock ``path``; None when it cannot be created; CaffeError when held."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except (OSError, ValueError):
            return None     # no lock where no snapshot can be written either
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CaffeError(f"snapshot prefix '{path[:-len(LOCK_SUFFIX)]}' is in use by "
                             f"another pycaffe run (pid {_holder(path)}, lock file '{path}'); "
                             "wait for it to end or give this run another snapshot_prefix"
                             ) from None
        except OSError:     # a filesystem without locks
            os.close(fd)
            return None
        # The previous holder removes the file as it lets go: lock the file now at ``path``.
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(fd), os.stat(path)):
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
        CaffeError: another live process holds the lock; the message gives its pid.
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
