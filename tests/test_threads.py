"""The thread policy (pycaffe_cli/threads.py): the usable cores from affinity and a cgroup
quota, the user's variables and --threads honoured, one pool (TBB's where installed)."""
import os
import subprocess
import sys

import numba
import pytest

from pycaffe_cli import threads
from tests.cli.conftest import run_in_process


@pytest.fixture
def cgroup(tmp_path, monkeypatch):
    """Point the quota files at tmp_path; returns a writer for cpu.max (v2)."""
    v2 = tmp_path / "cpu.max"
    monkeypatch.setattr(threads, "_CGROUP_V2", str(v2))
    monkeypatch.setattr(threads, "_CGROUP_V1", (str(tmp_path / "quota"),
                                                str(tmp_path / "period")))
    return v2


@pytest.mark.parametrize("text, cores", [("max 100000", None), ("150000 100000", 2),
                                         ("50000 100000", 1), ("400000 100000", 4)])
def test_a_cgroup_v2_quota(cgroup, text, cores):
    cgroup.write_text(text + "\n")
    assert threads._quota_cores() == cores


def test_a_cgroup_v1_quota(cgroup, tmp_path):
    (tmp_path / "quota").write_text("250000\n")
    (tmp_path / "period").write_text("100000\n")
    assert threads._quota_cores() == 3
    (tmp_path / "quota").write_text("-1\n")
    assert threads._quota_cores() is None


def test_usable_cores_are_the_affinity_capped_by_the_quota(cgroup, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    cgroup.write_text("max 100000")
    assert threads.usable_cores() == 4
    cgroup.write_text("200000 100000")
    assert threads.usable_cores() == 2


@pytest.mark.parametrize("variables, expected", [
    ({"NUMBA_NUM_THREADS": "3", "OMP_NUM_THREADS": "5"}, 3),
    ({"OMP_NUM_THREADS": "5", "OPENBLAS_NUM_THREADS": "7"}, 5),
    ({"OPENBLAS_NUM_THREADS": "7"}, 7),
    ({"OMP_NUM_THREADS": "zero"}, None),
])
def test_the_users_variables_come_first(monkeypatch, variables, expected):
    for name in threads.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert threads.default_threads() == (expected or threads.usable_cores())


def test_threads_flag_limits_the_compute_threads(tmp_path):
    net = tmp_path / "net.prototxt"
    net.write_text('layer { name: "d" type: "DummyData" top: "d" '
                   "dummy_data_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } } }\n"
                   'layer { name: "c" type: "Convolution" bottom: "d" top: "c" '
                   "convolution_param { num_output: 4 kernel_size: 3 } }")
    before = numba.get_num_threads()
    try:
        result = run_in_process("time", "--model", net, "--iterations", "1", "--threads", "1")
        assert result.code == 0, result.err
        assert numba.get_num_threads() == 1
    finally:
        numba.set_num_threads(before)
    assert run_in_process("time", "--model", net, "--threads", "0").code == 2


def test_one_pool_tbb_where_installed():
    """In a fresh process: numba's pool is sized to the usable cores and runs on TBB where
    the tbb wheel is installed (otherwise OpenMP, told to sleep between jobs)."""
    probe = ("import pycaffe_cli, numba, numpy as np\n"
             "from numba import njit, prange\n"
             "@njit(parallel=True)\n"
             "def f(x):\n"
             "    for i in prange(x.size): x[i] += 1\n"
             "f(np.zeros(4))\n"
             "print(numba.config.NUMBA_NUM_THREADS, numba.threading_layer())\n")
    env = {k: v for k, v in os.environ.items()
           if k not in threads.THREAD_VARIABLES + ("NUMBA_THREADING_LAYER", "OMP_WAIT_POLICY")}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                          text=True, timeout=120)
    pool, layer = done.stdout.split()
    assert int(pool) == threads.usable_cores()
    have_tbb = any(os.path.isfile(os.path.join(sys.prefix, "lib", name))
                   for name in ("libtbb.so.12", "libtbb.12.dylib"))
    assert layer == ("tbb" if have_tbb else "omp") or (not have_tbb and layer == "workqueue")
