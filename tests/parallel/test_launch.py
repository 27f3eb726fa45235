"""``pycaffe train --gpu 0,1``: device checks, one process per device, watched to the end.

Without a GPU the children are tests/parallel/fake_rank.py: the real ``pycaffe train`` as a
started rank, on the CPU, its NCCL replaced by FakeNccl; so the launcher, the pipe carrying
the id, the NCCL communicator's logic and the supervision run for real.
"""
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

from pycaffe_cli.commands.common import cuda_device_count
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.parallel import launch
from tests.parallel.fake_nccl import unique_id
from tests.parallel.helpers import make_job, messages, pycaffe, weights

FAKE_RANK = (sys.executable, os.path.join(os.path.dirname(__file__), "fake_rank.py"))


def test_device_ids_are_checked_before_anything_starts():
    launch.check_devices([0, 1], 2)
    with pytest.raises(CaffeError, match=r"^--gpu: device 0 given twice$"):
        launch.check_devices([0, 0])
    with pytest.raises(CaffeError, match=r"^--gpu: device 2 does not exist \(this machine has "
                                         r"2 CUDA devices\)$"):
        launch.check_devices([0, 2], 2)


@pytest.mark.parametrize("gpu", ["0,0", "0,1,0"])
def test_a_device_twice_on_the_command_line(tmp_path, gpu):
    run = pycaffe("train", "--solver", make_job(tmp_path, 8), "--gpu", gpu, cwd=tmp_path)
    assert run.returncode == 1
    assert run.stderr.splitlines()[-1] == "pycaffe: error: --gpu: device 0 given twice"


def test_a_device_this_machine_lacks(tmp_path):
    run = pycaffe("train", "--solver", make_job(tmp_path, 8), "--gpu", "0,5", cwd=tmp_path)
    count = cuda_device_count()
    assert run.returncode == 1
    if count:   # numba's CUDA simulator (the suite's default) has one device
        assert run.stderr.splitlines()[-1] == (f"pycaffe: error: --gpu: device 5 does not exist "
                                               f"(this machine has {count} CUDA device)")
    else:
        assert "no CUDA device is available" in run.stderr.splitlines()[-1]


def test_without_nccl_several_gpus_is_one_line(monkeypatch):
    from pycaffe_cli.parallel import nccl
    monkeypatch.setattr(nccl, "nccl_problem", lambda: "CuPy's NCCL binding is not available")
    with pytest.raises(CaffeError, match=r"--gpu 0,1: training on several GPUs sums the "
                                         r"gradients with NCCL, and CuPy's NCCL binding is not "
                                         r"available; install pycaffe\[gpu\]"):
        launch.run([0, 1], {"solver": "s"})


def test_each_child_gets_the_same_flags_and_one_device():
    flags = {"solver": "s.prototxt", "weights": None, "snapshot": "x.solverstate",
             "gpu": "0,1", "level": 0, "stage": None, "sigint_effect": "stop"}
    assert launch.child_args(flags, 1) == [
        "train", "--solver", "s.prototxt", "--snapshot", "x.solverstate", "--level", "0",
        "--sigint_effect", "stop", "--gpu", "1"]


def _run_ranks(folder, solver, during=None):
    """Start two fake ranks on ``solver`` from ``folder``; ``during(children, log)`` runs on a
    thread meanwhile. Returns (supervise's result or its CaffeError, seconds, log text)."""
    log_path = folder / "ranks.log"
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        with open(log_path, "w+") as log:
            children = launch.start_ranks([0, 1], {"solver": solver}, unique_id(),
                                          program=FAKE_RANK, stderr=log)
            if during is not None:
                threading.Thread(target=during, args=(children, log_path), daemon=True).start()
            started = time.monotonic()
            try:
                outcome = launch.supervise(children, ["rank 0 (GPU 0)", "rank 1 (GPU 1)"],
                                           grace_s=5)
            except CaffeError as error:
                outcome = error
            took = time.monotonic() - started
    finally:
        os.chdir(cwd)
        for child in children:
            if child.poll() is None:
                child.kill()
    return outcome, took, log_path.read_text()


@pytest.mark.slow
def test_two_fake_gpus_step_like_one_process_at_twice_the_batch(tmp_path):
    single = pycaffe("train", "--solver", make_job(tmp_path, 16), cwd=tmp_path)
    assert single.returncode == 0, single.stderr[-2000:]
    outcome, _, log = _run_ranks(tmp_path, make_job(tmp_path, 8))
    assert outcome == 0, log[-3000:]
    lines = messages(log)
    assert any(line.startswith("Data-parallel training on 2 ranks over NCCL") for line in lines)
    assert sum(line.startswith("Iteration 10 (") for line in lines) == 1
    one, two = (weights(tmp_path / f"out{b}" / "mlp_iter_20.caffemodel") for b in (16, 8))
    for key in one:
        np.testing.assert_allclose(two[key], one[key], rtol=1e-4, atol=0, err_msg=key)


def _when_training(log_path, then, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "Iteration 100 (" in log_path.read_text():
            then()
            return
        time.sleep(0.05)


@pytest.mark.slow
def test_ctrl_c_reaches_rank_0_which_stops_every_rank(tmp_path):
    solver = make_job(tmp_path, 8, max_iter=10 ** 6, snapshot=10 ** 6, display=100)

    def interrupt(children, log_path):   # the terminal's Ctrl-C reaches the launcher only
        _when_training(log_path, lambda: os.kill(os.getpid(), signal.SIGINT))

    outcome, _, log = _run_ranks(tmp_path, solver, during=interrupt)
    assert outcome == 0, log[-3000:]
    assert messages(log).count("Optimization stopped early.") == 1
    assert len([n for n in os.listdir(tmp_path / "out8") if n.endswith(".caffemodel")]) == 1


@pytest.mark.slow
def test_a_killed_rank_stops_the_others(tmp_path):
    solver = make_job(tmp_path, 8, max_iter=10 ** 6, snapshot=10 ** 6, display=100)
    killed = []

    def kill_rank_1(children, log_path):
        _when_training(log_path, lambda: (killed.append(time.monotonic()),
                                          os.kill(children[1].pid, signal.SIGKILL)))

    outcome, _, log = _run_ranks(tmp_path, solver, during=kill_rank_1)
    assert isinstance(outcome, CaffeError), log[-3000:]
    assert str(outcome) == ("rank 1 (GPU 1) was killed by signal 9 (SIGKILL); the other ranks "
                            "were stopped")
    assert killed and time.monotonic() - killed[0] < 10
