"""SyncedMemory: one float32 buffer that lives on the host, the device, or both.

Caffe's head states, and what each access does:

=============  ==========================  ==============================================
head           host access                 device access
=============  ==========================  ==============================================
UNINIT         allocate zeros -> AT_CPU    allocate zeros on the device -> AT_GPU
AT_CPU         nothing                     copy host -> device -> SYNCED
AT_GPU         copy device -> host         nothing
               -> SYNCED
SYNCED         nothing                     nothing
=============  ==========================  ==============================================

A *mutable* access then moves the head to the side that was asked for (AT_CPU / AT_GPU), so
the other copy is stale until the next access copies it over. Read-only host access (the loss
scalar, logging, snapshots) leaves the head SYNCED and costs no copy back.

In CPU mode nothing ever asks for the device copy, so the buffer stays a plain numpy array
and numba.cuda is never imported.

``version`` is a stamp drawn from one process-wide counter when the memory is made and at
every access that may change the values (``mutable_host``, ``mutable_device``,
``set_host``): no two memories share a stamp, so it tells both which memory a blob uses and
which write it holds. Whoever keeps something computed from a blob's values (the inference
plan's folded weights, Winograd's transformed weights, a convolution's column buffer)
compares ``data_stamps`` of the blobs to know when to redo it: a write through an accessor,
``share_data`` or weights loaded into the blob all change it. Writes through an array
obtained from an earlier mutable access are not seen.
"""
import enum
import itertools

import numpy as np


_STAMPS = itertools.count(1)  # next() is atomic under the GIL


def data_stamps(blobs):
    """The data stamps of ``blobs``: equal before and after only if no blob's data was
    written through an accessor and none uses other memory."""
    return tuple(blob.data_memory.version for blob in blobs)


class Head(enum.Enum):
    UNINIT = 0
    AT_CPU = 1
    AT_GPU = 2
    SYNCED = 3


class SyncedMemory:
    """``size`` float32 values, copied lazily between host and device.

    Args:
        size: number of elements (fixed for the object's life; blobs grow by replacing it).
    """
    # No __dict__: the inference plan reads hundreds of stamps before each pass, from memory
    # the last pass pushed out of the caches.
    __slots__ = ("size", "version", "head", "_host", "_device")

    def __init__(self, size):
        self.size = int(size)
        self.version = next(_STAMPS)
        self.head = Head.UNINIT
        self._host = None
        self._device = None

    # --- host --------------------------------------------------------------------------
    def host(self):
        """The host array, up to date; head unchanged except UNINIT -> AT_CPU and
        AT_GPU -> SYNCED."""
        if self.head is Head.UNINIT:
            self._host = np.zeros(self.size, np.float32)
            self.head = Head.AT_CPU
        elif self.head is Head.AT_GPU:
            if self._host is None:
                self._host = np.empty(self.size, np.float32)
            self._device.copy_to_host(self._host)
            self.head = Head.SYNCED
        return self._host

    def mutable_host(self):
        """The host array, for writing: the device copy (if any) becomes stale."""
        host = self.host()
        self.head = Head.AT_CPU
        self.version = next(_STAMPS)
        return host

    def set_host(self, array):
        """Adopt ``array`` (float32, 1-d, ``size`` long; pinned memory, say) as the host copy,
        which becomes the valid one (Caffe's set_cpu_data)."""
        if array.dtype != np.float32 or array.shape != (self.size,):
            raise ValueError(f"set_host needs a float32 array of {self.size} values, got "
                             f"{array.dtype} {array.shape}")
        self._host = array
        self.head = Head.AT_CPU
        self.version = next(_STAMPS)

    # --- device ------------------------------------------------------------------------
    def device(self):
        """The device array, up to date (allocated and copied on first use)."""
        from pycaffe_cli.cuda import memory
        if self.head is Head.UNINIT:
            self._device = memory.zeros(self.size)
            self.head = Head.AT_GPU
        elif self.head is Head.AT_CPU:
            if self._device is None:
                self._device = memory.empty(self.size)
            self._device.copy_to_device(self._host)
            self.head = Head.SYNCED
        return self._device

    def mutable_device(self):
        """The device array, for writing: the host copy (if any) becomes stale."""
        device = self.device()
        self.head = Head.AT_GPU
        self.version = next(_STAMPS)
        return device

    def async_push(self, stream):
        """Start copying the host copy to the device on ``stream`` (a data batch prefetched
        into pinned memory); the caller synchronizes the stream before the device copy is
        read. Head becomes SYNCED."""
        from pycaffe_cli.cuda import memory
        host = self.host()
        if self._device is None:
            self._device = memory.empty(self.size)
        self._device.copy_to_device(host, stream=stream)
        self.head = Head.SYNCED

    @property
    def allocated(self):
        """True once a host or device array exists (an UNINIT buffer holds no memory)."""
        return self._host is not None or self._device is not None

    @property
    def on_device(self):
        """True when the freshest copy is (also) on the device."""
        return self.head in (Head.AT_GPU, Head.SYNCED)


class SyncedMemoryView:
    """``size`` values of ``parent`` from ``offset``: a SyncedMemory whose state is the
    parent's (head, stamp, both copies), so that a write through the view is a write to
    the parent. The inference plan gives Concat's bottoms such views of its top, where each
    bottom is one contiguous run of the top (pycaffe_cli/inference/memory.py)."""

    def __init__(self, parent, offset, size):
        if offset < 0 or offset + size > parent.size:
            raise ValueError(f"a view of {size} values at {offset} does not fit a memory of "
                             f"{parent.size}")
        self.parent, self.offset, self.size = parent, int(offset), int(size)

    def _part(self, array):
        if self.offset == 0 and array.shape[0] == self.size:
            return array   # slicing a device array costs Python time (cuda/views.py)
        return array[self.offset:self.offset + self.size]

    def host(self):
        return self._part(self.parent.host())

    def mutable_host(self):
        return self._part(self.parent.mutable_host())

    def set_host(self, array):
        raise ValueError("a view of another memory cannot adopt an array")

    def device(self):
        return self._part(self.parent.device())

    def mutable_device(self):
        return self._part(self.parent.mutable_device())

    def async_push(self, stream):
        self.parent.async_push(stream)

    @property
    def version(self):
        """The parent's stamp and where the view starts: views of one memory at different
        offsets hold different values."""
        return self.parent.version, self.offset

    @property
    def head(self):
        return self.parent.head

    @property
    def allocated(self):
        return self.parent.allocated

    @property
    def on_device(self):
        return self.parent.on_device
