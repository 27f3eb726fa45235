"""The communicator over MPI (mpi4py), for ranks started by ``mpiexec``.

Buffers are host (numpy) arrays. Every wait polls its request instead of blocking inside MPI,
so that a rank whose partner died does not hang: at each ``LIVENESS_S`` of waiting the ranks
on this machine are checked by pid, and a dead one ends the wait with a ``CommError`` naming
it (the caller then aborts the job). Ranks on other machines are watched by the launcher:
MPICH's and Open MPI's ``mpiexec`` end the whole job when one of its processes dies.

Object collectives (pickled, mpi4py's ``bcast`` / ``gather``) first meet at a polled
``Ibarrier`` for the same reason: a rank may wait there for as long as rank 0 tests.

``mpi4py`` is imported only when a communicator is made, after ``parallel.detect_launch``
has checked that it is installed.
"""
import os
import socket
import time

from pycaffe_cli.parallel.communicator import CommError, Communicator

LIVENESS_S = 0.5          # how often a waiting rank checks that its local partners live
_LONGEST_NAP_S = 0.001    # the longest sleep between two polls of a request
ABORT_GRACE_SECONDS = 0.5  # time for mpiexec to forward the error line before MPI_Abort


class MpiCommunicator(Communicator):
    """MPI_COMM_WORLD of the processes ``mpiexec`` started."""

    kind = "MPI"

    def __init__(self):
        from mpi4py import MPI
        self._mpi = MPI
        self._comm = MPI.COMM_WORLD
        self.rank, self.size = self._comm.Get_rank(), self._comm.Get_size()
        local = self._comm.Split_type(MPI.COMM_TYPE_SHARED)
        self.local_rank, self.local_size = local.Get_rank(), local.Get_size()
        local.Free()
        self.hosts_and_pids = self._comm.allgather((socket.gethostname(), os.getpid()))
        self.pids = tuple(pid for _, pid in self.hosts_and_pids)

    def allreduce_start(self, buffer):
        return self._comm.Iallreduce(self._mpi.IN_PLACE, buffer, op=self._mpi.SUM)

    def allreduce_test(self, handle):
        return handle.Test()

    def allreduce_wait(self, handle):
        self.wait(handle)

    def bcast(self, buffer, root=0):
        self.wait(self._comm.Ibcast(buffer, root=root))

    def bcast_object(self, obj, root=0):
        self.wait(self._comm.Ibarrier())
        return self._comm.bcast(obj, root=root)

    def gather_object(self, obj, root=0):
        self.wait(self._comm.Ibarrier())
        return self._comm.gather(obj, root=root)

    def abort(self, status):
        # MPI_Abort makes mpiexec kill every rank at once; its I/O forwarder can drop the
        # error line this rank has just written unless it gets a moment to pass it on.
        time.sleep(ABORT_GRACE_SECONDS)
        self._comm.Abort(status)

    def wait(self, request):
        """Poll ``request`` until it completes, checking the local ranks now and then."""
        nap = 0.0
        check_at = time.monotonic() + LIVENESS_S
        while not request.Test():
            time.sleep(nap)
            nap = min(2 * nap or 1e-5, _LONGEST_NAP_S)
            if time.monotonic() >= check_at:
                check_peers(self.hosts_and_pids, self.rank)
                check_at = time.monotonic() + LIVENESS_S


def check_peers(hosts_and_pids, own_rank, host=None):
    """Raise CommError naming the first rank on this machine whose process is gone."""
    host = host or socket.gethostname()
    for rank, (rank_host, pid) in enumerate(hosts_and_pids):
        if rank != own_rank and rank_host == host and not process_alive(pid):
            raise CommError(f"rank {rank} (pid {pid}) has died; stopping the run (its own "
                            "output, above, may say why)")


def process_alive(pid):
    """Whether ``pid`` is a live process (a zombie, dead but not yet reaped, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stream:
            return stream.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
