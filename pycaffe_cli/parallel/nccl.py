"""The communicator over NCCL, one GPU per rank (Caffe's NCCL class, through CuPy's binding).

``CupyNccl`` is the only code that calls NCCL: in-place sums on a stream of their own that
first waits (on the device, not the host) for the work queued so far, so a bucket's reduce
runs while backward continues on the default stream; ``wait`` makes the default stream wait
for it in turn. ``NcclCommunicator`` is the ``Communicator`` over such a library object;
tests run it over a fake one (tests/parallel/fake_nccl.py) since CI has no GPU.

The unique id that ties the ranks together is made once (``new_unique_id``, by the launcher
or by MPI rank 0) and handed to every rank: through a pipe by ``pycaffe train --gpu 0,1``
(launch.py), through MPI under ``mpiexec``, which then also carries the object messages.
"""
import os

import numpy as np

from pycaffe_cli.parallel.communicator import ArrayObjects, Communicator

NCCL_ID_BYTES = 128


def nccl_problem():
    """None when CuPy's NCCL binding can be used here, else why not (a phrase)."""
    try:
        from cupy.cuda import nccl
    except Exception as error:   # no CuPy, or CuPy without its NCCL library
        return f"CuPy's NCCL binding is not available ({type(error).__name__}: {error})"
    if not getattr(nccl, "available", True):
        return "CuPy's NCCL binding is not available (CuPy was built without NCCL)"
    return None


def new_unique_id():
    """A new NCCL unique id, as bytes (CuPy 13 gives a tuple of ints, CuPy 14 bytes)."""
    from cupy.cuda import nccl
    uid = nccl.get_unique_id()
    return bytes(uid) if isinstance(uid, bytes) else np.array(uid, np.int8).tobytes()


class CupyNccl:
    """NCCL on device ``device`` for rank ``rank`` of ``size``, over CuPy's binding."""

    def __init__(self, size, uid, rank, device):
        import cupy
        from cupy.cuda import nccl
        self.xp = cupy
        self._nccl = nccl
        cupy.cuda.Device(device).use()
        if int(cupy.__version__.split(".")[0]) < 14:   # CuPy 13 takes a tuple of ints
            uid = tuple(np.frombuffer(uid, np.int8).tolist())
        self._comm = nccl.NcclCommunicator(size, uid, rank)
        self._stream = cupy.cuda.Stream(non_blocking=True)
        self._types = {np.dtype(np.float32): nccl.NCCL_FLOAT32,
                       np.dtype(np.int64): nccl.NCCL_INT64,
                       np.dtype(np.uint8): nccl.NCCL_UINT8}

    def _current(self):
        return self.xp.cuda.get_current_stream()

    def all_reduce(self, array):
        """Enqueue ``array`` += the other ranks' after the work queued so far; an event."""
        self._stream.wait_event(self._current().record())
        self._comm.allReduce(array.data.ptr, array.data.ptr, array.size,
                             self._types[array.dtype], self._nccl.NCCL_SUM, self._stream.ptr)
        return self._stream.record()

    @staticmethod
    def done(event):
        return event.done

    def wait(self, event):
        self._current().wait_event(event)

    def bcast(self, array, root):
        self._comm.bcast(array.data.ptr, array.size, self._types[array.dtype], root,
                         self._current().ptr)

    def all_gather(self, send, recv):
        self._comm.allGather(send.data.ptr, recv.data.ptr, send.size, self._types[send.dtype],
                             self._current().ptr)

    def data_of(self, blob):
        """A CuPy view of the blob's device data (numba's array, no copy)."""
        return self.xp.asarray(blob.mutable_gpu_data)

    def diff_of(self, blob):
        return self.xp.asarray(blob.mutable_gpu_diff)

    def to_device(self, host):
        return self.xp.asarray(host)

    def to_host(self, array):
        return self.xp.asnumpy(array)

    def abort(self):
        self._comm.abort()

    def close(self):
        self._comm.destroy()


class NcclCommunicator(ArrayObjects, Communicator):
    """Device buffers summed by NCCL; objects through ``control`` (MPI) when given, else as
    bytes over NCCL itself.

    Args:
        lib: a ``CupyNccl`` (or a fake with its methods).
        rank, size: this rank and the number of ranks.
        control: a Communicator for the object messages and for abort, or None.
    """

    kind = "NCCL"

    def __init__(self, lib, rank, size, control=None):
        self._lib = lib
        self.xp = lib.xp
        self.rank, self.size = rank, size
        self._control = control
        if control is not None:
            self.local_rank, self.local_size = control.local_rank, control.local_size
            self.pids = control.pids

    def allreduce_start(self, buffer):
        return self._lib.all_reduce(buffer)

    def allreduce_test(self, handle):
        return self._lib.done(handle)

    def allreduce_wait(self, handle):
        self._lib.wait(handle)

    def bcast(self, buffer, root=0):
        self._lib.bcast(buffer, root)

    def allgather(self, send, recv):
        self._lib.all_gather(send, recv)

    def bcast_object(self, obj, root=0):
        if self._control is not None:
            return self._control.bcast_object(obj, root)
        return ArrayObjects.bcast_object(self, obj, root)

    def gather_object(self, obj, root=0):
        if self._control is not None:
            return self._control.gather_object(obj, root)
        return ArrayObjects.gather_object(self, obj, root)

    def abort(self, status):
        """End this run on every rank: through MPI when there is MPI; else this rank exits
        and the launcher (launch.py), seeing it go, stops the others."""
        if self._control is not None:
            self._control.abort(status)
        try:
            self._lib.abort()
        finally:
            os._exit(status)

    def close(self):
        self._lib.close()

    def to_device(self, host):
        return self._lib.to_device(host)

    def to_host(self, array):
        return self._lib.to_host(array)

    def data_of(self, blob):
        return self._lib.data_of(blob)

    def diff_of(self, blob):
        return self._lib.diff_of(blob)
