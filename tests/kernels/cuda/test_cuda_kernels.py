"""numba.cuda kernels against the CPU kernels, through numba's CUDA simulator (no GPU needed).

The simulator has to be enabled before numba.cuda is first imported, and this pytest process
imports numba for the CPU tests, so the comparisons run in a child process
(``run_sim_checks.py``) started with NUMBA_ENABLE_CUDASIM=1. Where NVVM is installed,
``compile_ptx_checks.py`` also compiles every kernel with the real CUDA compiler (typing the
simulator cannot check), and where ptxas is installed assembles the PTX for Hopper. The launch
sizing is plain arithmetic and is tested here directly.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from pycaffe_cli.cuda import launch

SCRIPT = pathlib.Path(__file__).with_name("run_sim_checks.py")
PTX_SCRIPT = pathlib.Path(__file__).with_name("compile_ptx_checks.py")
KERNELS = ["im2col_batch", "col2im_batch", "im2col", "col2im", "max_pool_forward",
           "max_pool_backward", "ave_pool_forward", "ave_pool_backward",
           "sto_pool_forward_train", "sto_pool_backward", "sto_pool_forward_test",
           "sto_pool_backward_test", "lrn_across_forward", "lrn_across_backward",
           "default launch sizing"]


def test_cuda_kernels_match_cpu_kernels_in_the_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    done = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in KERNELS:
        assert f"checked {name}: " in done.stdout, (name, done.stdout)


def test_cuda_kernels_compile_to_ptx():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, str(PTX_SCRIPT)], env=env, capture_output=True,
                          text=True, timeout=120)
    if done.returncode == 3:
        pytest.skip("no NVVM (CUDA toolkit) here: " + done.stdout.strip())
    assert done.returncode == 0, done.stdout + done.stderr
    for kernel in ("im2col", "col2im", "max_pool_forward", "route_backward", "ave_pool_forward",
                   "ave_pool_backward", "sto_pool_train", "sto_pool_test", "sto_pool_test_grad",
                   "lrn_across_forward", "lrn_across_backward"):
        assert f"compiled _{kernel}_kernel" in done.stdout, (kernel, done.stdout)
    if shutil.which("ptxas"):
        assert re.search(r"^assembled (\d+) of \1 for sm_90$", done.stdout, re.M), done.stdout


def test_the_checks_refuse_to_run_on_a_real_device_import():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0
    assert "NUMBA_ENABLE_CUDASIM=1" in done.stderr


@pytest.mark.parametrize("n, expected", [
    (1, (1, 32)), (32, (1, 32)), (33, (1, 64)), (256, (1, 256)), (257, (2, 256)),
    (4096 * 256, (4096, 256)), (4096 * 256 + 1, (4096, 256)), (10 ** 9, (4096, 256))])
def test_blocks_threads_defaults(n, expected, monkeypatch):
    # conftest shrinks the defaults for the simulator; these are the real-device ones
    monkeypatch.setattr(launch, "THREADS_PER_BLOCK", 256)
    monkeypatch.setattr(launch, "MAX_BLOCKS", 4096)
    assert launch.blocks_threads(n) == expected


@pytest.mark.parametrize("n", [1, 31, 100, 1000, 12345])
@pytest.mark.parametrize("threads, max_blocks", [(32, 1), (64, 3), (100, 7), (512, 4096)])
def test_blocks_threads_cover_n_with_whole_warps(n, threads, max_blocks):
    blocks, per_block = launch.blocks_threads(n, threads, max_blocks)
    assert per_block % launch.WARP == 0 and launch.WARP <= per_block <= threads
    assert 1 <= blocks <= max_blocks
    # a grid-stride loop needs no more than one full grid's worth of idle threads
    assert blocks * per_block < n + per_block or blocks == max_blocks


@pytest.mark.parametrize("args", [(0,), (-3,), (10, 16), (10, 256, 0)])
def test_blocks_threads_rejects_bad_sizes(args):
    with pytest.raises(ValueError):
        launch.blocks_threads(*args)


def test_launch_skips_empty_work_and_passes_n_first():
    calls = []

    class Kernel:
        def __getitem__(self, config):
            return lambda *args: calls.append((config, args))

    launch.launch(Kernel(), 0, "a")
    assert calls == []
    launch.launch(Kernel(), 300, "a", 2)
    assert calls == [(launch.blocks_threads(300), (300, "a", 2))]
