"""The communicator interface: the single process, NCCL's (over the fake), MPI's waits, the
launch detection and what a failing rank does."""
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG
from pycaffe_cli.parallel import detect_launch, mpi, training
from pycaffe_cli.parallel.communicator import CommError, SingleProcess
from pycaffe_cli.parallel.nccl import NcclCommunicator
from tests.parallel.fake_nccl import FakeNccl, unique_id


def on_ranks(size, work, timeout=30):
    """Run ``work(comm)`` on ``size`` threads, each an NcclCommunicator over FakeNccl;
    return the results in rank order (re-raising a thread's exception)."""
    uid = unique_id()
    results, errors = [None] * size, []

    def rank_main(rank):
        try:
            comm = NcclCommunicator(FakeNccl(size, uid, rank), rank, size)
            results[rank] = work(comm)
            comm.close()
        except BaseException as error:   # handed to the test below
            errors.append(error)

    threads = [threading.Thread(target=rank_main, args=(rank,)) for rank in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    if errors:
        raise errors[0]
    return results


def test_single_process_exchanges_nothing():
    comm = SingleProcess()
    buffer = np.arange(4, dtype=np.float32)
    comm.allreduce(buffer)
    comm.bcast(buffer)
    np.testing.assert_array_equal(buffer, np.arange(4))
    assert comm.bcast_object("x") == "x"
    assert comm.gather_object({"a": 1}) == [{"a": 1}]
    assert (comm.rank, comm.size, comm.is_root) == (0, 1, True)


def test_nccl_sums_and_broadcasts_arrays():
    def work(comm):
        values = np.full(5, comm.rank + 1, np.float32)
        comm.allreduce_wait(comm.allreduce_start(values))
        mine = np.full(3, 10.0 * comm.rank, np.float32)
        comm.bcast(mine, root=2)
        return values, mine
    for values, mine in on_ranks(3, work):
        np.testing.assert_array_equal(values, np.full(5, 6))
        np.testing.assert_array_equal(mine, np.full(3, 20))


def test_nccl_carries_objects_as_bytes():
    def work(comm):
        told = comm.bcast_object({"decision": "stop"} if comm.is_root else None)
        gathered = comm.gather_object("x" * (comm.rank * 1000))   # lengths differ, one empty
        empty = comm.bcast_object(b"" if comm.is_root else None)
        return told, gathered, empty
    results = on_ranks(3, work)
    assert [told for told, _, _ in results] == [{"decision": "stop"}] * 3
    assert results[0][1] == ["", "x" * 1000, "x" * 2000]
    assert results[1][1] is None and results[2][1] is None
    assert [empty for _, _, empty in results] == [b""] * 3


def test_process_alive_sees_a_dead_and_a_zombie_child():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while mpi.process_alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.01)   # exited but not reaped: a zombie
    assert not mpi.process_alive(child.pid)
    child.wait()
    assert not mpi.process_alive(child.pid)
    assert mpi.process_alive(os.getpid())


def test_a_waiting_mpi_rank_notices_a_dead_local_rank(monkeypatch):
    monkeypatch.setattr(mpi, "LIVENESS_S", 0.05)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    comm = mpi.MpiCommunicator.__new__(mpi.MpiCommunicator)   # no MPI needed to wait
    comm.rank = 0
    comm.hosts_and_pids = [(mpi.socket.gethostname(), os.getpid()),
                           (mpi.socket.gethostname(), child.pid)]

    class NeverDone:
        def Test(self):
            return False

    started = time.monotonic()
    with pytest.raises(CommError, match=f"rank 1 \\(pid {child.pid}\\) has died"):
        comm.wait(NeverDone())
    assert time.monotonic() - started < 5


class _Aborting(SingleProcess):
    size, rank = 2, 1

    def abort(self, status):
        raise SystemExit(f"aborted {status}")


@pytest.mark.parametrize("error, line, status", [
    (CaffeError("bad\nrecord"), "pycaffe: error: rank 1: bad record", 1),
    (KeyboardInterrupt(), "pycaffe: error: rank 1: interrupted", 130),
    (RuntimeError("bug"), "pycaffe: error: rank 1 failed (the traceback above)", 1)])
def test_a_failing_rank_says_so_and_ends_every_rank(capsys, error, line, status):
    with pytest.raises(SystemExit, match=f"aborted {status}"):
        with training.ending_every_rank_on_error(_Aborting()):
            raise error
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == line
    assert ("Traceback" in err) == isinstance(error, RuntimeError)


def test_a_single_process_keeps_its_exceptions():
    with pytest.raises(CaffeError, match="plain"):
        with training.ending_every_rank_on_error(SingleProcess()):
            raise CaffeError("plain")


def test_detect_launch_reads_the_launchers_variables():
    assert detect_launch({}).kind == "single"
    assert detect_launch({"PMI_RANK": "0", "PMI_SIZE": "1"}).kind == "single"
    found = detect_launch({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4"},
                          mpi4py_installed=lambda: True)
    assert (found.kind, found.rank, found.size) == ("mpi", 3, 4)
    spawned = detect_launch({"PYCAFFE_RANK": "1", "PYCAFFE_SIZE": "2"})
    assert (spawned.kind, spawned.rank, spawned.size) == ("spawned", 1, 2)
    with pytest.raises(CaffeError, match="PMI_SIZE should be a number"):
        detect_launch({"PMI_RANK": "0", "PMI_SIZE": "two"})
    with pytest.raises(CaffeError, match=r"started by mpiexec as one of 2 processes, but "
                                         r"mpi4py is not installed: install pycaffe\[mpi\]"):
        detect_launch({"PMI_RANK": "1", "PMI_SIZE": "2"}, mpi4py_installed=lambda: False)


@pytest.fixture
def restored_log():
    saved = LOG.handlers[:], LOG.propagate, LOG.level
    yield
    LOG.handlers[:], LOG.propagate = saved[0], saved[1]
    LOG.setLevel(saved[2])


def test_mpi_launch_without_mpi4py_from_the_command_line(tmp_path, monkeypatch, capsys,
                                                         restored_log):
    """What each rank does when mpiexec starts pycaffe without mpi4py: one line, status 1."""
    import importlib.util

    from pycaffe_cli.cli import main
    from tests.parallel.helpers import make_job
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "mpi4py" else real(name, *args))
    monkeypatch.setenv("PMI_RANK", "1")
    monkeypatch.setenv("PMI_SIZE", "2")
    assert main(["train", "--solver", make_job(tmp_path, 8)]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert lines == ["pycaffe: error: started by mpiexec as one of 2 processes, but mpi4py is "
                     "not installed: install pycaffe[mpi] (pip install 'pycaffe[mpi]', which "
                     "brings mpi4py and an MPICH), or run pycaffe train without mpiexec"]
