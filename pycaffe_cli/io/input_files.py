"""Checks on the files a user names, made before any of them is opened.

Opening a named pipe blocks until a writer appears, and reading a device (``/dev/zero``) never
ends, so every input file is looked at with ``os.stat`` first: it must be a regular file, and
no larger than what its reader can hold. The checks run again on the open descriptor, so a
file swapped between the two looks is caught as well. ``/dev/stdin`` is accepted when it is
redirected from a regular file (``< net.prototxt``), and refused when it is a pipe or a
terminal.

The size limits are named constants: ``MAX_PROTOTXT_BYTES`` for text prototxts (nets,
solvers), ``MAX_PROTO_BYTES`` for binary protos (weights, mean files, solver states: protobuf
itself cannot decode a message of 2 GiB, and Caffe stops at the same size),
``MAX_LIST_BYTES`` for list files (image lists, HDF5 lists, window files) and
``MAX_IMAGE_BYTES`` for one encoded image. HDF5 files and databases have no size limit: they
are read piece by piece.
"""
import os
import stat
from typing import NamedTuple

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.sizes import MIB
# Parsing a text prototxt takes about 15 times its size in memory, and time to match
# (docs/kernel-choices.md, "Memory estimates"); the largest published nets are below 1 MB.
MAX_PROTOTXT_BYTES = 128 * MIB
MAX_PROTO_BYTES = (1 << 31) - 1   # protobuf's limit (Caffe's kProtoReadBytesLimit, INT_MAX)
MAX_LIST_BYTES = 1024 * MIB       # ImageNet's training list (1.28 M lines) is about 50 MB
MAX_IMAGE_BYTES = 1024 * MIB

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_SHOWN_CHARS = 120


class SizeLimit(NamedTuple):
    """How large a file a reader accepts (``size``), and the rule in words for the error."""

    size: int
    rule: str


PROTOTXT_LIMIT = SizeLimit(MAX_PROTOTXT_BYTES,
                           "pycaffe reads text prototxts of up to 128 MiB (MAX_PROTOTXT_BYTES)")
PROTO_LIMIT = SizeLimit(MAX_PROTO_BYTES,
                        "protobuf cannot decode a binary proto of 2 GiB or more (Caffe stops "
                        "there too)")
LIST_LIMIT = SizeLimit(MAX_LIST_BYTES,
                       "pycaffe reads list files of up to 1 GiB (MAX_LIST_BYTES)")
IMAGE_LIMIT = SizeLimit(MAX_IMAGE_BYTES,
                        "pycaffe reads image files of up to 1 GiB (MAX_IMAGE_BYTES)")

_KINDS = ((stat.S_ISDIR, "Is a directory"), (stat.S_ISFIFO, "Is a named pipe (FIFO)"),
          (stat.S_ISCHR, "Is a character device"), (stat.S_ISBLK, "Is a block device"),
          (stat.S_ISSOCK, "Is a socket"))


def shown(path):
    """``path`` as an error message shows it: control characters escaped, and a very long path
    cut in the middle (with its length), so that the message stays one readable line."""
    text = os.fsdecode(path) if isinstance(path, bytes) else str(path)
    if not text.isprintable():
        text = text.encode("unicode_escape", "backslashreplace").decode("ascii")
    if len(text) > _SHOWN_CHARS:
        text = f"{text[:60]}...{text[-40:]} ({len(text)} characters)"
    return text


def _limits():
    try:
        return os.pathconf("/", "PC_PATH_MAX"), os.pathconf("/", "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 4096, 255


def path_problem(path):
    """Why ``path`` can name no file (a NUL byte, longer than PATH_MAX, a component longer
    than NAME_MAX), or None when it could."""
    text = os.fsdecode(path) if isinstance(path, bytes) else str(path)
    if "\0" in text:
        return "the path contains a NUL byte, which no file name can hold"
    encoded = os.fsencode(text)
    path_max, name_max = _limits()
    if len(encoded) >= path_max:
        return (f"the path is {len(encoded)} bytes long; the system allows paths shorter than "
                f"{path_max} bytes (PATH_MAX)")
    longest = max(encoded.split(b"/"), key=len)
    if len(longest) > name_max:
        return (f"a file name in the path is {len(longest)} bytes long; the system allows "
                f"{name_max} (NAME_MAX)")
    return None


def kind_problem(mode):
    """Why a file of this ``st_mode`` is not a regular file ("Is a directory, not a regular
    file", ...), or None for a regular file."""
    for test, kind in _KINDS:
        if test(mode):
            return f"{kind}, not a regular file"
    return None if stat.S_ISREG(mode) else "Is not a regular file"


def _size_problem(size, limit):
    if limit is None or size <= limit.size:
        return None
    return f"the file is {size / MIB:.1f} MiB; {limit.rule}"


def file_problem(path, limit=None):
    """Why ``path`` cannot be read as an input file, or None when it can.

    Args:
        path: the file, as the user named it.
        limit: a SizeLimit, or None for no size limit.

    Returns:
        A reason such as "No such file or directory", "Is a named pipe (FIFO), not a regular
        file" or "the file is 300.0 MiB; ..." (callers put it after the file's name).
    """
    info, problem = _stat(path)
    if problem:
        return problem
    return kind_problem(info.st_mode) or _size_problem(info.st_size, limit)


def _stat(path):
    """(os.stat result, None), or (None, why the path cannot even be looked at)."""
    problem = path_problem(path)
    if problem:
        return None, problem
    try:
        return os.stat(path), None
    except OSError as error:
        return None, error.strerror or str(error)


def dir_problem(path):
    """Why ``path`` cannot be read as a folder (a database), or None when it can."""
    info, problem = _stat(path)
    if problem:
        return problem
    if stat.S_ISDIR(info.st_mode):
        return None
    kind = next((kind for test, kind in _KINDS if test(info.st_mode)), "Is a regular file")
    return f"{kind}, not a folder"


def _cannot_read(what, path, problem):
    return CaffeError(f"cannot read {what} '{shown(path)}': {problem}")


def check_input_file(path, what, limit=None):
    """Raise ``CaffeError("cannot read <what> 'path': <reason>")`` unless ``path`` is a
    regular file within ``limit`` (a SizeLimit, or None)."""
    problem = file_problem(path, limit)
    if problem:
        raise _cannot_read(what, path, problem)


def read_input_bytes(path, what, limit=None):
    """The whole of the regular file ``path``, checked before and after it is opened.

    Args:
        path: the file.
        what: how errors name it ("net file", "weights file", ...).
        limit: a SizeLimit, or None for no size limit.

    Raises:
        CaffeError: ``cannot read <what> 'path': <reason>``: missing, unreadable, not a
            regular file (never opened then), too large, or an impossible path.
    """
    check_input_file(path, what, limit)
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | _CLOEXEC)
    except OSError as error:
        raise _cannot_read(what, path, error.strerror or error) from None
    with os.fdopen(fd, "rb") as stream:
        try:
            info = os.fstat(fd)
            problem = kind_problem(info.st_mode) or _size_problem(info.st_size, limit)
            if problem:
                raise _cannot_read(what, path, problem)
            data = stream.read() if limit is None else _read_limited(stream, info, limit)
        except OSError as error:
            raise _cannot_read(what, path, error.strerror or error) from None
    if limit is not None and len(data) > limit.size:
        raise _cannot_read(what, path, f"the file grew past {limit.size / MIB:.1f} MiB while "
                                       f"it was read; {limit.rule}")
    return data


def _read_limited(stream, info, limit):
    """Up to ``limit.size + 1`` bytes (one more tells a file that grew past the limit). The
    first read asks for the size the file had when opened, plus one byte to notice growth:
    Python allocates what a read asks for, and asking for the limit (1 GiB for images) at
    every image made each read map and unmap that much memory, the decode threads queueing
    on the process's memory map."""
    data = stream.read(min(info.st_size, limit.size) + 1)
    if len(data) > info.st_size and len(data) <= limit.size:  # it grew while being read
        data += stream.read(limit.size + 1 - len(data))
    return data


def read_input_text(path, what, limit=LIST_LIMIT):
    """A list file's text. Bytes that are not UTF-8 survive as Python's surrogate escapes, so
    file names in it reach the file system exactly as written (Caffe reads them as bytes)."""
    return read_input_bytes(path, what, limit).decode("utf-8", "surrogateescape")
