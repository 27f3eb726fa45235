"""``mpiexec -n 2 pycaffe train`` on this machine's CPU: Caffe's multi-solver semantics.

Each test starts real processes under MPICH's mpiexec (the mpi extra; the test extra brings
it too) and skips, saying why, where mpi4py or mpiexec is missing.
"""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.parallel.helpers import (MPIEXEC, child_env, make_job, max_relative_difference,
                                    messages, mpich_segments, need_mpi, pycaffe,
                                    remove_orphaned_segments, weights)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The job trained once at batch 16 in one process and once at batch 8 on two ranks."""
    need_mpi()
    folder = tmp_path_factory.mktemp("mpi")
    one = pycaffe("train", "--solver", make_job(folder, 16), cwd=folder)
    two = pycaffe("train", "--solver", make_job(folder, 8), cwd=folder, ranks=2)
    return folder, one, two


def test_two_ranks_at_batch_8_step_like_one_process_at_batch_16(trained):
    folder, one, two = trained
    assert one.returncode == 0, one.stderr[-2000:]
    assert two.returncode == 0, two.stderr[-2000:]
    single, double = (weights(folder / f"out{b}" / "mlp_iter_20.caffemodel") for b in (16, 8))
    for key in single:
        np.testing.assert_allclose(double[key], single[key], rtol=1e-4, atol=0, err_msg=key)
    assert max_relative_difference(double, single) < 1e-4
    assert "Gradient clipping: scaling down gradients" in two.stderr   # clipping took part


def test_rank_0_alone_logs_and_writes(trained):
    folder, _, two = trained
    lines = messages(two.stderr)
    assert sum(line.startswith("Iteration 10 (") for line in lines) == 1
    assert sum(line.startswith("Snapshotting to binary proto file") for line in lines) == 2
    assert sum(line == "Optimization Done." for line in lines) == 2   # solver + train, once
    assert any(line.startswith("Data-parallel training on 2 ranks over MPI") for line in lines)
    assert sorted(os.listdir(folder / "out8")) == sorted(
        f"mlp_iter_{i}.{ext}" for i in (10, 20)
        for ext in ("caffemodel", "solverstate", "solverstate.pycaffe.json"))


def test_resume_on_as_many_ranks_is_exact_and_on_another_count_restarts_the_data(trained):
    folder, _, _ = trained
    for ranks in (2, 1):
        prefix = f"again{ranks}/mlp"
        solver = make_job(folder, 8, prefix=prefix)
        for ext in ("caffemodel", "solverstate", "solverstate.pycaffe.json"):
            (folder / f"again{ranks}" / f"mlp_iter_10.{ext}").write_bytes(
                (folder / "out8" / f"mlp_iter_10.{ext}").read_bytes())
        run = pycaffe("train", "--solver", solver, "--snapshot",
                      f"again{ranks}/mlp_iter_10.solverstate", cwd=folder, ranks=ranks)
        assert run.returncode == 0, run.stderr[-2000:]
        resumed = weights(folder / f"again{ranks}" / "mlp_iter_20.caffemodel")
        if ranks == 2:
            assert "saved by a run on" not in run.stderr
            uninterrupted = weights(folder / "out8" / "mlp_iter_20.caffemodel")
            assert all(np.array_equal(resumed[k], uninterrupted[k]) for k in resumed)
        else:
            assert ("was saved by a run on 2 process(es) and this one has 1: resume will not "
                    "be exact") in run.stderr


def _start(folder, solver):
    stream = open(folder / "log.txt", "w+")
    process = subprocess.Popen([MPIEXEC, "-n", "2", sys.executable, "-m", "pycaffe_cli",
                                "train", "--solver", solver], cwd=folder, stdout=stream,
                               stderr=subprocess.STDOUT, env=child_env(),
                               start_new_session=True)
    return process, stream


def _wait_for_pids(stream, process, timeout=30):
    """The ranks' pids, from rank 0's log, once it has logged iteration 100."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        stream.seek(0)
        text = stream.read()
        if "Iteration 100 (" in text:
            pids = text.split("(pids ", 1)[1].split(";", 1)[0]
            return [int(pid) for pid in pids.split(", ")]
        time.sleep(0.05)
    stream.seek(0)
    pytest.fail(f"training did not get going: {stream.read()[-2000:]}")


@pytest.fixture
def long_job(tmp_path):
    """A job that runs until stopped; the tests that use it stop ranks by force, so the
    MPICH segments left behind are removed afterwards."""
    need_mpi()
    before = mpich_segments()
    yield make_job(tmp_path, 8, max_iter=10 ** 6, snapshot=10 ** 6, display=100)
    remove_orphaned_segments(before)


def test_sigint_on_rank_0_stops_every_rank_with_one_snapshot(tmp_path, long_job):
    process, stream = _start(tmp_path, long_job)
    try:
        rank0, _ = _wait_for_pids(stream, process)
        os.kill(rank0, signal.SIGINT)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    stream.seek(0)
    lines = messages(stream.read())
    assert sum(line == "Optimization stopped early." for line in lines) == 1
    models = [name for name in os.listdir(tmp_path / "out8") if name.endswith(".caffemodel")]
    assert len(models) == 1


def test_a_killed_rank_ends_the_run_within_seconds(tmp_path, long_job):
    process, stream = _start(tmp_path, long_job)
    try:
        _, rank1 = _wait_for_pids(stream, process)
        killed = time.monotonic()
        os.kill(rank1, signal.SIGKILL)
        status = process.wait(30)
        took = time.monotonic() - killed
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    stream.seek(0)
    output = stream.read()
    assert status != 0
    assert took < 10
    # the launcher reports the killed rank in its own words: MPICH "KILLED BY SIGNAL: 9
    # (Killed)" with the PID, Open MPI "exited on signal 9 (Killed)" (its PID not always)
    assert "Killed" in output


def test_an_error_on_rank_0_ends_every_rank(tmp_path, long_job):
    """Rank 0 cannot take the snapshot prefix's lock; rank 1, waiting for rank 0's weights,
    must not hang."""
    import fcntl
    (tmp_path / "out8").mkdir(exist_ok=True)
    fd = os.open(tmp_path / "out8" / "mlp.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        run = pycaffe("train", "--solver", long_job, cwd=tmp_path, ranks=2, timeout=60)
    finally:
        os.close(fd)
    assert run.returncode != 0   # 1 from MPI_Abort (mpiexec may report rank 1's kill first)
    assert "pycaffe: error: rank 0: snapshot prefix 'out8/mlp' is in use" in run.stderr
