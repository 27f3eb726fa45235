"""``pycaffe train`` and its snapshots under stress: a full disk, two runs on one prefix,
temporary files of a killed run, SIGINT ignored by the shell, and kill -9 at random moments."""
import errno
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from pycaffe_cli.io import files
from pycaffe_cli.solvers.run_lock import snapshot_prefix_lock
from pycaffe_cli.solvers.state import read_solver_state

PYCAFFE = os.path.join(os.path.dirname(sys.executable), "pycaffe")

# Gaussian data drawn from the shared generator at every forward, and momentum: a resume is
# exact only if the generator, the history and the weights all come back.
NET = """
name: "k9"
layer { name: "data" type: "DummyData" top: "x" top: "y"
        dummy_data_param { shape { dim: 8 dim: 2000 } shape { dim: 8 }
                           data_filler { type: "gaussian" std: 1 }
                           data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.01 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "z" bottom: "y" top: "loss" }
"""


def write_solver(folder, max_iter=3, fmt="BINARYPROTO", snapshot=1):
    """A solver snapshotting every ``snapshot`` iterations to ``folder/k9``; returns its
    path."""
    folder.mkdir(exist_ok=True)
    (folder / "net.prototxt").write_text(NET)
    path = folder / "solver.prototxt"
    path.write_text(f'net: "{folder / "net.prototxt"}"\nbase_lr: 0.01\nmomentum: 0.9\n'
                    f'lr_policy: "fixed"\nmax_iter: {max_iter}\nsnapshot: {snapshot}\n'
                    f'snapshot_format: {fmt}\nsnapshot_prefix: "{folder / "k9"}"\n'
                    f'random_seed: 3\ndisplay: 0\n')
    return str(path)


def error_line(result):
    lines = result.error_lines()
    assert len(lines) == 1 and result.code == 1, result.err[-2000:]
    assert "Traceback" not in result.err
    return lines[0]


# --- in-process ------------------------------------------------------------------------
def test_full_disk_during_training_is_one_line(run_cli, tmp_path, monkeypatch):
    solver = write_solver(tmp_path / "run")
    real = files._commit

    def commit(temp_path, path):
        if path.endswith("_iter_2.solverstate"):
            raise files._cannot_write(path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        real(temp_path, path)
    monkeypatch.setattr(files, "_commit", commit)
    line = error_line(run_cli("train", "-solver", solver))
    state = tmp_path / "run" / "k9_iter_2.solverstate"
    assert line == (f"pycaffe: error: cannot write '{state}': No space left on device (the "
                    "snapshot of iteration 2 is not written; earlier snapshots are kept)")
    assert sorted(os.listdir(tmp_path / "run")) == [
        "k9_iter_1.caffemodel", "k9_iter_1.solverstate", "k9_iter_1.solverstate.pycaffe.json",
        "k9_iter_2.caffemodel", "net.prototxt", "solver.prototxt"]


def test_a_second_run_on_the_same_prefix_is_refused(run_cli, tmp_path):
    solver = write_solver(tmp_path / "run")
    prefix = str(tmp_path / "run" / "k9")
    with snapshot_prefix_lock(prefix):
        line = error_line(run_cli("train", "-solver", solver))
    assert line == (f"pycaffe: error: snapshot prefix '{prefix}' is in use by another pycaffe "
                    f"run (pid {os.getpid()}, lock file '{prefix}.lock'); wait for it to end "
                    "or give this run another snapshot_prefix")
    assert not any("_iter_" in name for name in os.listdir(tmp_path / "run"))
    result = run_cli("train", "-solver", solver)          # free again once the first ends
    assert result.code == 0, result.err[-2000:]
    assert not os.path.exists(prefix + ".lock")


def test_a_stale_lock_and_stale_temporaries_are_cleared(run_cli, tmp_path):
    solver = write_solver(tmp_path / "run")
    folder = tmp_path / "run"
    (folder / "k9.lock").write_text("999999999\n")       # left by a run killed with -9
    stale = [".k9_iter_4.solverstate.ab_c1234.part", ".k9_iter_2.caffemodel.h5.x9.part",
             ".k9_iter_7.solverstate.pycaffe.json.q.part"]
    kept = [".other_iter_4.solverstate.abc.part", ".k9_iter_4.solverstate", "notes.part",
            ".k9_iter_x.caffemodel.a.part"]
    for name in stale + kept:
        (folder / name).write_text("x")
    result = run_cli("train", "-solver", solver)
    assert result.code == 0, result.err[-2000:]
    for name in stale:
        assert f"Removed {folder / name}, a temporary file left by an interrupted run" in (
            result.messages)
    names = set(os.listdir(folder))
    assert names.isdisjoint(stale) and names.issuperset(kept)
    assert "k9.lock" not in names


def test_lock_is_per_prefix_and_released(tmp_path):
    first, second = str(tmp_path / "a"), str(tmp_path / "b")
    with snapshot_prefix_lock(first), snapshot_prefix_lock(second):
        assert os.path.exists(first + ".lock") and os.path.exists(second + ".lock")
    assert os.listdir(tmp_path) == []
    with snapshot_prefix_lock(str(tmp_path / "missing" / "p")):   # no folder: no lock
        pass


# --- subprocesses ------------------------------------------------------------------------
def test_sigint_stops_training_even_when_started_with_sigint_ignored(tmp_path):
    """A shell starts background jobs with SIGINT ignored; Caffe installs its handler anyway,
    so ``kill -INT`` still stops the run (and snapshots), and so does pycaffe."""
    solver = write_solver(tmp_path / "run", max_iter=100000, snapshot=0)
    log = tmp_path / "log.txt"
    with open(log, "w") as stderr:
        process = subprocess.Popen(
            [PYCAFFE, "train", "-solver", solver], stderr=stderr,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        try:
            deadline = time.monotonic() + 120
            while "Starting Optimization" not in log.read_text():
                assert process.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            time.sleep(0.3)
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=120) == 0, log.read_text()[-2000:]
        finally:
            if process.poll() is None:
                process.kill()
    assert "Optimization stopped early." in log.read_text()
    assert any(name.endswith(".solverstate") for name in os.listdir(tmp_path / "run"))


def _start(solver, folder, *flags):
    """Start ``pycaffe train``; return the process and the time its first state appeared.

    Its log goes to ``<folder>.log`` (a pipe nobody reads could fill up and stall it)."""
    with open(f"{folder}.log", "w") as log:
        process = subprocess.Popen([PYCAFFE, "train", "-solver", solver, *flags],
                                   stdout=subprocess.DEVNULL, stderr=log)
    process.log = f"{folder}.log"
    deadline = time.monotonic() + 120
    while not any(name.endswith((".solverstate", ".solverstate.h5"))
                  for name in os.listdir(folder)):
        if process.poll() is not None or time.monotonic() > deadline:
            break
        time.sleep(0.005)
    return process, time.monotonic()


def _finish(process):
    process.wait(timeout=300)
    with open(process.log) as log:
        assert process.returncode == 0, log.read()[-3000:]


def _states(folder, suffix):
    return {int(name.split("_iter_")[1][:-len(suffix)]): folder / name
            for name in os.listdir(folder) if name.endswith(suffix)}


def _final(folder, max_iter, fmt):
    model = ".caffemodel.h5" if fmt == "HDF5" else ".caffemodel"
    state = ".solverstate.h5" if fmt == "HDF5" else ".solverstate"
    history = read_solver_state(str(folder / f"k9_iter_{max_iter}{state}")).history
    if fmt == "HDF5":
        from pycaffe_cli.io.weights import read_weights
        return [a for _, arrays in read_weights(str(folder / f"k9_iter_{max_iter}{model}"))
                for a in arrays] + history
    return [(folder / f"k9_iter_{max_iter}{model}").read_bytes()] + history


@pytest.mark.slow
@pytest.mark.parametrize("fmt, trials", [("BINARYPROTO", 3), ("HDF5", 2)])
def test_kill_9_at_random_moments_then_resume_is_exact(tmp_path, fmt, trials):
    max_iter = 100
    suffix = ".solverstate.h5" if fmt == "HDF5" else ".solverstate"
    reference = tmp_path / "reference"
    process, first_state = _start(write_solver(reference, max_iter, fmt), reference)
    _finish(process)
    span = time.monotonic() - first_state
    expected = _final(reference, max_iter, fmt)
    moments = random.Random(fmt)
    killed = 0
    for trial in range(trials):
        folder = tmp_path / f"trial{trial}"
        solver = write_solver(folder, max_iter, fmt)
        process, first_state = _start(solver, folder)
        time.sleep(moments.uniform(0.0, 0.8 * span))
        process.kill()
        process.wait(timeout=300)
        killed += process.returncode == -signal.SIGKILL
        states = _states(folder, suffix)
        for iteration, state in states.items():      # a state never lacks its sidecar
            assert os.path.exists(str(state) + ".pycaffe.json"), state
            assert read_solver_state(str(state)).iter == iteration
        newest = states[max(states)]
        if max(states) < max_iter:
            _finish(_start(solver, folder, "-snapshot", str(newest))[0])
        assert not [n for n in os.listdir(folder) if n.endswith((".part", ".lock"))]
        for got, want in zip(_final(folder, max_iter, fmt), expected):
            assert np.array_equal(got, want) if isinstance(got, np.ndarray) else got == want
    assert killed >= 1
