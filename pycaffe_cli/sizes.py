"""How large a blob may be, checked before anything is allocated, and allocation failures
turned into one line that names the layer.

A blob shape is refused, as Caffe's Blob::Reshape refuses it ("blob size exceeds INT_MAX"),
when it holds more than ``MAX_BLOB_COUNT`` (INT_MAX, 2**31 - 1) values, so a float32 blob is
at most 8 GiB; and also when its values alone (4 bytes each) would need more than the machine's
physical memory. Counts are Python integers, so a product of huge dimensions cannot wrap around
as an int64 product does (100000 x 100000 x 100000 x 100000 x 100000 is not 0 here).

What can still fail at allocation time (many blobs together, a full GPU) is a MemoryError;
``blamed`` turns it, numpy's "array is too big" ValueErrors and a blob's own size errors into
an ``AllocationError`` (or CaffeError) that names the layer, for Layer.setup, forward and
backward to raise.

Huge prototxts are measured against the memory still available before they are parsed and
before their net is built (``check_parse_memory``, ``check_net_memory``): protobuf's C code
does not raise MemoryError when an allocation fails, it crashes (SIGSEGV), which is how a
net of a million layers used to end on a machine without the 6 GB it took.
"""
import functools
import math
import os

import numpy as np

from pycaffe_cli.errors import CaffeError, layer_error

try:
    import resource
except ImportError:   # not on Windows
    resource = None

FLOAT_BYTES = 4
MAX_BLOB_COUNT = 2 ** 31 - 1
MIB = 1 << 20
# What parsing takes per byte of text, and building the net per layer (protobuf copies, Python
# objects): a margin above what was measured (docs/kernel-choices.md, "Memory estimates").
PARSE_BYTES_PER_BYTE = 16
NET_BYTES_PER_LAYER = 5 << 10
CHECK_FROM_BYTES = 64 * MIB   # smaller needs are not worth reading /proc for
_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")

# numpy's words for an array whose size cannot even be represented (a ValueError, not a
# MemoryError): np.empty(2**63) and a shape with more than 2**63 elements.
_NUMPY_TOO_BIG = ("array is too big", "Maximum allowed dimension exceeded")


class AllocationError(CaffeError, MemoryError):
    """A blob or buffer that cannot be allocated: a user error (one line on the command
    line), and still a MemoryError for code that catches those."""


@functools.lru_cache(maxsize=1)
def physical_memory():
    """Bytes of physical memory this process may use (the machine's, or its container's
    cgroup limit when lower), or None where the system does not say."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        total = None
    limits = [_read_number(limit) for limit, _ in _CGROUP_FILES]
    known = [n for n in [total] + limits if n and n < 1 << 60]   # v1 says 2**63 for none
    return min(known) if known else None


# (limit, usage) files of cgroup v2 and v1, as a container sees its own cgroup
_CGROUP_FILES = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                 ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                  "/sys/fs/cgroup/memory/memory.usage_in_bytes"))


def _read_number(path, key=None):
    """The number that file ``path`` holds (or its line ``key: N [kB]`` holds), in bytes;
    None where the file or the line is missing or holds no number ("max")."""
    try:
        with open(path) as stream:
            lines = stream.read().splitlines()
    except OSError:
        return None
    if key is not None:
        lines = [line.split(":", 1)[1] for line in lines if line.startswith(key + ":")]
    words = lines[0].split() if lines else []
    if not words or not words[0].isdigit():
        return None
    return int(words[0]) * (1024 if words[-1] == "kB" else 1)


def available_memory():
    """Bytes this process can still allocate, as far as the system says: the memory and swap
    the kernel has free (MemAvailable + SwapFree), within the cgroup's limit and the
    address-space limit (ulimit -v); None where none of these is known."""
    known = []
    free = _read_number("/proc/meminfo", "MemAvailable")
    if free is not None:
        known.append(free + (_read_number("/proc/meminfo", "SwapFree") or 0))
    for limit_file, usage_file in _CGROUP_FILES:
        limit, usage = _read_number(limit_file), _read_number(usage_file)
        if limit is not None and usage is not None and limit < 1 << 60:
            known.append(max(limit - usage, 0))
    soft = resource.getrlimit(resource.RLIMIT_AS)[0] if resource else -1
    size = _read_number("/proc/self/status", "VmSize")
    if soft >= 0 and size is not None:   # RLIM_INFINITY is -1
        known.append(max(soft - size, 0))
    return min(known) if known else None


def check_available(count, what):
    """Raise AllocationError when ``what`` needs ``count`` bytes and fewer are available;
    needs under CHECK_FROM_BYTES pass unchecked."""
    if count < CHECK_FROM_BYTES:
        return
    free = available_memory()
    if free is not None and count > free:
        raise AllocationError(f"{what} needs about {format_bytes(count)} of memory, more than "
                              f"the {format_bytes(free)} available")


def check_parse_memory(path, size):
    """Refuse to parse a text prototxt of ``size`` bytes that memory cannot hold."""
    check_available(size * PARSE_BYTES_PER_BYTE,
                    f"parsing {path} ({format_bytes(size)} of text)")


def check_net_memory(param):
    """Refuse to build a net from the NetParameter ``param`` that memory cannot hold."""
    count = len(param.layer) + len(param.layers)
    check_available(count * NET_BYTES_PER_LAYER, f"building a net of {count} layers")


def format_bytes(count):
    """``'372.5 GiB'``, ``'12.0 MiB'``, ``'3.3 PiB'``: a byte count for an error message."""
    value = count / 1024
    for unit in _UNITS[:-1]:
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} {_UNITS[-1]}" if value < 10000 else f"{value:.3g} {_UNITS[-1]}"


def _format_count(count):
    return f"{count}" if count < 10 ** 15 else f"{count:.3g}"


def checked_count(shape, what="a blob"):
    """The number of values in ``shape``, after checking that it can be allocated.

    Args:
        shape: a sequence of non-negative ints.
        what: how the error names the array ("a blob", "the column buffer").

    Raises:
        AllocationError: more than MAX_BLOB_COUNT values, or more bytes than physical memory.
    """
    count = math.prod(shape)
    if count <= MAX_BLOB_COUNT and max(shape, default=0) <= MAX_BLOB_COUNT:
        _check_memory(count, shape, what)
        return count
    dims = " ".join(str(d) for d in shape)
    if count <= MAX_BLOB_COUNT:
        raise AllocationError(f"{what} of shape {dims} has a dimension over {MAX_BLOB_COUNT} "
                              "(INT_MAX), more than a Caffe blob can have")
    raise AllocationError(f"{what} of shape {dims} needs {format_bytes(count * FLOAT_BYTES)} "
                          f"({_format_count(count)} values), more than the {MAX_BLOB_COUNT} "
                          "values (INT_MAX) a Caffe blob can hold")


def _check_memory(count, shape, what):
    limit = physical_memory()
    if limit is not None and count * FLOAT_BYTES > limit:
        dims = " ".join(str(d) for d in shape)
        check_bytes(count * FLOAT_BYTES, f"{what} of shape {dims}")


def check_bytes(count, what):
    """Raise AllocationError when ``count`` bytes are more than the machine's physical
    memory; ``what`` names what needs them ("the prefetch queue (4 batches of 64 3 227 227)").
    """
    limit = physical_memory()
    if limit is not None and count > limit:
        raise AllocationError(f"{what} needs {format_bytes(count)}, more than this machine's "
                              f"{format_bytes(limit)} of memory")


def grow(buffer, size, what):
    """``buffer`` (flat float32) if it holds ``size`` values, else a new one that does, after
    ``check_bytes``; ``what`` names it ("a column buffer"). Scratch kept from call to call."""
    if buffer.size >= size:
        return buffer
    check_bytes(size * FLOAT_BYTES, f"{what} of {size} values")
    return np.empty(size, np.float32)


def is_allocation_failure(error):
    """Whether ``error`` says that memory could not be had (numpy's MemoryError, its
    ValueErrors for sizes it cannot represent, or a device's out-of-memory error)."""
    if isinstance(error, MemoryError):
        return True
    return isinstance(error, ValueError) and str(error).startswith(_NUMPY_TOO_BIG)


def blamed(error, layer, stage):
    """``error`` as a CaffeError naming ``layer``, or None when it should pass unchanged.

    Args:
        error: what ``layer``'s ``stage`` raised.
        layer: the Layer that was running.
        stage: "setup", "forward" or "backward".

    Returns:
        A CaffeError (AllocationError for failed allocations) naming the layer, for a
        CaffeError that names no layer yet or an allocation failure; otherwise None.
    """
    if isinstance(error, CaffeError):
        if error.layer is not None:
            return None
        wrapped = layer_error(layer.name, f"{layer.type}: {error}")
        if isinstance(error, AllocationError):
            wrapped = AllocationError(str(wrapped), layer=layer.name)
        wrapped.user_exception = getattr(error, "user_exception", None)
        return wrapped
    if not is_allocation_failure(error):
        return None
    detail = str(error) or type(error).__name__
    message = f"{layer.type}: out of memory in {stage} ({detail})"
    return AllocationError(str(layer_error(layer.name, message)), layer=layer.name)
