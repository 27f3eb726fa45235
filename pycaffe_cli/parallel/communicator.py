"""The one interface data-parallel training talks through, and its single-process case.

A ``Communicator`` connects the ``size`` processes (ranks) of one training run. Training
needs only these operations from it:

    allreduce_start(buffer) -> handle   sum ``buffer`` over the ranks, in place; may return
                                        before it is done (the reduce overlaps backward)
    allreduce_test(handle) -> bool      let it progress; True once done
    allreduce_wait(handle)              until done
    bcast(buffer, root=0)               ``root``'s values into every rank's ``buffer``
    bcast_object(obj, root=0) -> obj    ``root``'s (picklable) object, on every rank
    gather_object(obj, root=0)          the list of every rank's object on ``root``, None
                                        elsewhere
    abort(status)                       end every rank now (a rank failed)
    data_of(blob) / diff_of(blob)       a blob's flat data / diff as the array kind the
                                        buffers above are (numpy on the host, CuPy on a GPU)

Buffers are flat float32 (or uint8) arrays of the kind ``xp`` (numpy or CuPy) makes.
Implementations: ``SingleProcess`` (here: one rank, every operation a no-op),
``MpiCommunicator`` (mpi.py: host arrays over MPI) and ``NcclCommunicator`` (nccl.py: device
arrays over NCCL). ``ArrayObjects`` builds the two object operations from the array ones, for
a communicator that has no object channel of its own (NCCL).
"""
import os
import pickle

import numpy as np

from pycaffe_cli.errors import CaffeError


class CommError(CaffeError):
    """Another rank failed or went away; this rank cannot go on."""


class Communicator:
    """The interface (see the module docstring); ``rank``, ``size``, ``kind`` and ``xp``."""

    rank = 0
    size = 1
    local_rank = 0
    local_size = 1
    kind = "single process"
    xp = np
    pids = ()

    def allreduce_start(self, buffer):
        raise NotImplementedError

    def allreduce_test(self, handle):
        raise NotImplementedError

    def allreduce_wait(self, handle):
        raise NotImplementedError

    def bcast(self, buffer, root=0):
        raise NotImplementedError

    def bcast_object(self, obj, root=0):
        raise NotImplementedError

    def gather_object(self, obj, root=0):
        raise NotImplementedError

    def abort(self, status):
        raise NotImplementedError

    def close(self):
        """Release what the communicator holds (at the end of a run)."""

    @property
    def is_root(self):
        return self.rank == 0

    def empty(self, count, dtype=np.float32):
        """A flat buffer of ``count`` values for the operations above."""
        return self.xp.empty(count, dtype)

    def data_of(self, blob):
        return blob.flat_data

    def diff_of(self, blob):
        return blob.flat_diff

    def allreduce(self, buffer):
        """Sum ``buffer`` over the ranks, in place, before returning."""
        self.allreduce_wait(self.allreduce_start(buffer))


class SingleProcess(Communicator):
    """One rank: nothing to exchange."""

    pids = (os.getpid(),)

    def allreduce_start(self, buffer):
        return None

    def allreduce_test(self, handle):
        return True

    def allreduce_wait(self, handle):
        pass

    def bcast(self, buffer, root=0):
        pass

    def bcast_object(self, obj, root=0):
        return obj

    def gather_object(self, obj, root=0):
        return [obj]

    def abort(self, status):
        os._exit(status)


class ArrayObjects:
    """``bcast_object`` and ``gather_object`` over ``bcast`` and ``allgather`` of uint8 and
    int64 arrays (pickled bytes, sizes first), for communicators without an object channel.

    The class mixing this in provides ``bcast(buffer, root)``, ``allgather(send, recv)``
    (``recv`` holds ``size`` blocks of ``send``'s length, in rank order), ``empty``,
    ``to_device(numpy array)`` and ``to_host(array)``.
    """

    def bcast_object(self, obj, root=0):
        payload = pickle.dumps(obj) if self.rank == root else b""
        length = self.to_device(np.array([len(payload)], np.int64))
        self.bcast(length, root)
        count = int(self.to_host(length)[0])
        buffer = self.to_device(_padded(payload, count))
        self.bcast(buffer, root)
        return obj if self.rank == root else pickle.loads(self.to_host(buffer).tobytes())

    def gather_object(self, obj, root=0):
        payload = pickle.dumps(obj)
        lengths = self.empty(self.size, np.int64)
        self.allgather(self.to_device(np.array([len(payload)], np.int64)), lengths)
        lengths = self.to_host(lengths)
        longest = int(lengths.max())
        gathered = self.empty(longest * self.size, np.uint8)
        self.allgather(self.to_device(_padded(payload, longest)), gathered)
        if self.rank != root:
            return None
        blocks = self.to_host(gathered).reshape(self.size, longest)
        return [pickle.loads(block[:length].tobytes()) for block, length in zip(blocks, lengths)]


def _padded(payload, length):
    block = np.zeros(length, np.uint8)
    block[:len(payload)] = np.frombuffer(payload, np.uint8)
    return block
