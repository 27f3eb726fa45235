"""Blob: Caffe's N-d float32 array pair (``data`` and ``diff``).

Storage is a flat SyncedMemory (``synced_memory.py``) that only grows (Caffe's capacity rule),
so reshaping to the same or a smaller count keeps the memory and anything sharing it.

Access, named as Caffe's: a reading accessor never invalidates the other copy, a writing one
(``mutable_*``) makes the other copy stale.

* ``cpu_data`` / ``cpu_diff``: read-only numpy views (shaped) of the host copy.
* ``data`` / ``diff``: writable numpy views (shaped) of the host copy: Caffe's
  mutable_cpu_data / mutable_cpu_diff, under the names BVLC's Python Blob gives them.
* ``gpu_data`` / ``gpu_diff``: FLAT device views for reading (kernels index them flat, as
  Caffe's pointers). A device array cannot be made read-only: write only through
* ``mutable_gpu_data`` / ``mutable_gpu_diff``: FLAT device views for writing.

Whole-blob maths (``update``, ``asum_*``, ``sumsq_*``, ``scale_diff``...) runs where the
freshest copy is, as Caffe's Blob does.
"""
import math
import operator

import numpy as np

from pycaffe_cli import backend
from pycaffe_cli.cuda.views import first
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.sizes import checked_count
from pycaffe_cli.synced_memory import SyncedMemory

MAX_BLOB_AXES = 32


class BlobShapeError(CaffeError, ValueError):
    """An impossible blob shape: one line from the command line (a CaffeError), a ValueError
    to a Python caller (``net.blobs["data"].reshape(-1, 3)``)."""


def _dims(shape):
    """``shape`` as a tuple of Python ints; TypeError naming the first dimension that is not
    an integer. int(1.5) would truncate and True would count as 1, so only int and numpy
    integers (anything with ``__index__`` but bool) pass."""
    shape, dims = tuple(shape), []
    for dim in shape:
        try:
            if isinstance(dim, (bool, np.bool_)):
                raise TypeError
            dims.append(operator.index(dim))
        except TypeError:
            raise TypeError(f"blob dimensions must be integers, got {dim!r} in "
                            f"{shape!r}") from None
    return tuple(dims)


class Blob:
    """A named-less pair of float32 arrays of one shape.

    Args:
        shape: initial shape (sequence of non-negative ints); empty for an unshaped blob.
    """

    def __init__(self, shape=()):
        self._shape = ()
        self._count = 0
        self._data_mem = SyncedMemory(0)
        self._diff_mem = SyncedMemory(0)
        self.reshape(shape)

    # --- shape -------------------------------------------------------------------------
    def reshape(self, shape):
        """Give the blob a new shape, growing storage only when the count exceeds capacity.

        Raises:
            TypeError: a dimension is not an integer (1.5, "3", True).
            BlobShapeError: a negative dimension, or more than MAX_BLOB_AXES axes.
            AllocationError: more values than a Caffe blob or the machine can hold.
        """
        shape = _dims(shape)
        if len(shape) > MAX_BLOB_AXES:
            raise BlobShapeError(f"blob shape {shape} has more than {MAX_BLOB_AXES} axes")
        negative = [d for d in shape if d < 0]
        if negative:
            raise BlobShapeError(f"blob shape {shape} has a negative dimension {negative[0]}")
        count = checked_count(shape)
        # data and diff grow apart: the inference plan gives data a buffer bigger than the blob
        if count > self._data_mem.size:
            self._data_mem = SyncedMemory(count)
        if count > self._diff_mem.size:
            self._diff_mem = SyncedMemory(count)
        self._shape = shape
        self._count = count

    def reshape_like(self, other):
        self.reshape(other.shape)

    @property
    def shape(self):
        return self._shape

    @property
    def num_axes(self):
        return len(self._shape)

    def count(self, start=0, end=None):
        """Number of elements in axes [start, end) (all of them by default)."""
        if start == 0 and end is None:
            return self._count
        end = self.num_axes if end is None else end
        return math.prod(self._shape[start:end])

    def canonical_axis_index(self, axis):
        """Map a possibly negative axis into [0, num_axes), with Caffe's range check."""
        n = self.num_axes
        if not -n <= axis < max(n, 1):
            raise CaffeError(f"axis {axis} out of range for a {n}-axis blob with shape "
                             f"{self.shape_string()}")
        return axis + n if axis < 0 else axis

    def shape_at(self, axis):
        return self._shape[self.canonical_axis_index(axis)]

    def legacy_shape(self, index):
        """Caffe's num/channels/height/width accessors: missing axes count as 1."""
        if index >= self.num_axes or index < -self.num_axes:
            return 1
        return self._shape[index]

    @property
    def num(self):
        return self.legacy_shape(0)

    @property
    def channels(self):
        return self.legacy_shape(1)

    @property
    def height(self):
        return self.legacy_shape(2)

    @property
    def width(self):
        return self.legacy_shape(3)

    def shape_string(self):
        """``'64 1 28 28 (50176)'``, the form Caffe logs shapes in."""
        return "".join(f"{d} " for d in self._shape) + f"({self._count})"

    # --- data --------------------------------------------------------------------------
    @property
    def data(self):
        return self._data_mem.mutable_host()[:self._count].reshape(self._shape)

    @data.setter
    def data(self, value):
        self.data[...] = value

    @property
    def diff(self):
        return self._diff_mem.mutable_host()[:self._count].reshape(self._shape)

    @diff.setter
    def diff(self, value):
        self.diff[...] = value

    @property
    def flat_data(self):
        return self._data_mem.mutable_host()[:self._count]

    @property
    def flat_diff(self):
        return self._diff_mem.mutable_host()[:self._count]

    @property
    def cpu_data(self):
        """Read-only host view of data; the device copy stays valid (Caffe's cpu_data)."""
        return read_only(self._data_mem.host()[:self._count].reshape(self._shape))

    @property
    def cpu_diff(self):
        """Read-only host view of diff (Caffe's cpu_diff)."""
        return read_only(self._diff_mem.host()[:self._count].reshape(self._shape))

    @property
    def gpu_data(self):
        """Flat device view of data for reading; the host copy stays valid (Caffe's gpu_data)."""
        return first(self._data_mem.device(), self._count)

    @property
    def gpu_diff(self):
        """Flat device view of diff for reading (Caffe's gpu_diff)."""
        return first(self._diff_mem.device(), self._count)

    @property
    def mutable_gpu_data(self):
        """Flat device view of data for writing; the host copy becomes stale."""
        return first(self._data_mem.mutable_device(), self._count)

    @property
    def mutable_gpu_diff(self):
        """Flat device view of diff for writing."""
        return first(self._diff_mem.mutable_device(), self._count)

    @property
    def data_memory(self):
        """The SyncedMemory behind data (data layers push batches through it)."""
        return self._data_mem

    def share_data(self, other):
        """Use ``other``'s data storage (Caffe's ShareData); the counts must match."""
        if other.count() != self._count:
            raise CaffeError(f"cannot share data of blobs with counts {other.count()} and "
                             f"{self._count}")
        self._data_mem = other._data_mem

    def use_data_memory(self, memory):
        """Keep data in ``memory``, a SyncedMemory of at least count() values that other
        blobs may use too (the inference plan's shared buffers); the values are not copied."""
        if memory.size < self._count:
            raise CaffeError(f"a buffer of {memory.size} values cannot hold the data of a blob "
                             f"of {self._count}")
        self._data_mem = memory

    def share_diff(self, other):
        if other.count() != self._count:
            raise CaffeError(f"cannot share diff of blobs with counts {other.count()} and "
                             f"{self._count}")
        self._diff_mem = other._diff_mem

    def shares_data_with(self, other):
        return self._data_mem is other._data_mem

    def _data_on_device(self):
        return self._count > 0 and self._data_mem.on_device

    def _diff_on_device(self):
        return self._count > 0 and self._diff_mem.on_device

    def update(self):
        """Apply the computed step: ``data -= diff``, where data is freshest (Caffe's
        Update)."""
        if self._data_on_device():
            gpu_math().axpy(self._count, -1.0, self.gpu_diff, self.mutable_gpu_data)
        else:
            np.subtract(self.flat_data, self.flat_diff, out=self.flat_data)

    def scale_diff(self, factor):
        """diff *= factor, where diff is freshest."""
        if self._diff_on_device():
            gpu_math().scal(self._count, factor, self.mutable_gpu_diff)
        else:
            self.flat_diff[:] *= np.float32(factor)

    def zero_diff(self):
        """diff = 0: on the device in GPU mode, else on the host (Net::ClearParamDiffs)."""
        if backend.mode() is backend.Mode.GPU:
            from pycaffe_cli.cuda import memory
            memory.fill(self.mutable_gpu_diff, 0)
        else:
            self.flat_diff[:] = 0

    def copy_from(self, source, copy_diff=False, reshape=False):
        """Copy source's data (or diff) into this blob, reshaping first if asked."""
        if source.shape != self._shape:
            if not reshape:
                raise CaffeError(f"trying to copy blobs of different sizes: "
                                 f"{source.shape_string()} vs {self.shape_string()}")
            self.reshape(source.shape)
        if backend.mode() is backend.Mode.GPU and self._count:
            from pycaffe_cli.cuda import memory
            if copy_diff:
                memory.copy(source.gpu_diff, self.mutable_gpu_diff)
            else:
                memory.copy(source.gpu_data, self.mutable_gpu_data)
        elif copy_diff:
            self.flat_diff[:] = source.cpu_diff.ravel()
        else:
            self.flat_data[:] = source.cpu_data.ravel()

    def asum_data(self):
        if self._data_on_device():
            return gpu_math().asum(self._count, self.gpu_data)
        return float(np.abs(self.cpu_data, dtype=np.float64).sum())

    def asum_diff(self):
        if self._diff_on_device():
            return gpu_math().asum(self._count, self.gpu_diff)
        return float(np.abs(self.cpu_diff, dtype=np.float64).sum())

    def sumsq_data(self):
        if self._data_on_device():
            return gpu_math().sumsq(self._count, self.gpu_data)
        flat = self.cpu_data.ravel()
        return float(np.dot(flat.astype(np.float64), flat))

    def sumsq_diff(self):
        if self._diff_on_device():
            return gpu_math().sumsq(self._count, self.gpu_diff)
        flat = self.cpu_diff.ravel()
        return float(np.dot(flat.astype(np.float64), flat))

    # --- protobuf ----------------------------------------------------------------------
    def to_proto(self, proto, write_diff=False):
        """Fill a caffe.BlobProto with shape and data (and diff), as Caffe's ToProto does."""
        proto.Clear()
        proto.shape.dim.extend(self._shape)
        proto.data.extend(self.cpu_data.ravel().tolist())
        if write_diff:
            proto.diff.extend(self.cpu_diff.ravel().tolist())
        return proto

    def from_proto(self, proto, reshape=True):
        """Load a caffe.BlobProto (new ``shape`` or legacy num/channels/height/width)."""
        shape = proto_shape(proto)
        if reshape:
            self.reshape(shape)
        elif not self.shape_equals(proto):
            raise CaffeError(f"shape mismatch: blob is {self.shape_string()}, "
                             f"proto is {tuple(shape)}")
        self._load_values(proto.double_data, proto.data, self.flat_data, "data")
        self._load_values(proto.double_diff, proto.diff, self.flat_diff, "diff")

    def _load_values(self, doubles, floats, out, what):
        values = doubles if len(doubles) else floats
        if len(values) == 0:
            return
        if len(values) != self._count:
            raise CaffeError(f"blob proto has {len(values)} {what} values for shape "
                             f"{self.shape_string()}")
        out[:] = np.asarray(values, dtype=np.float32)

    def shape_equals(self, proto):
        if proto_has_legacy_shape(proto):
            return self.num_axes <= 4 and all(
                self.legacy_shape(i - 4) == d for i, d in enumerate(legacy_dims(proto)))
        return tuple(proto.shape.dim) == self._shape

    def __repr__(self):
        return f"Blob({self.shape_string()})"


def read_only(array):
    """A read-only view of ``array``, as ``Blob.cpu_data`` gives. numba compiles a kernel
    once for each kind of array it is called with, read-only and writable being two kinds:
    inputs that come as blob views elsewhere are passed read-only everywhere."""
    view = array.view()
    view.flags.writeable = False
    return view


def gpu_math():
    """The CUDA math module (imported only when a blob is on the device)."""
    from pycaffe_cli.cuda import math
    return math


def proto_has_legacy_shape(proto):
    return any(proto.HasField(f) for f in ("num", "channels", "height", "width"))


def legacy_dims(proto):
    return (proto.num, proto.channels, proto.height, proto.width)


def proto_shape(proto):
    """The shape a BlobProto describes, honouring the legacy 4-d fields."""
    if proto_has_legacy_shape(proto):
        return tuple(legacy_dims(proto))
    return tuple(proto.shape.dim)
