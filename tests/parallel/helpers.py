"""A small training job for the data-parallel tests, and how to read its results.

An MLP (InnerProduct - ReLU - InnerProduct - SoftmaxWithLoss: no batch statistics) on 64 rows
of HDF5 data, read in order, trained with SGD + momentum + weight decay + gradient clipping
(which must see the summed gradient). At batch 8 on two ranks it must end where it ends at
batch 16 in one process.
"""
import os
import re
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from pycaffe_cli.proto import caffe_pb2

NET = """name: "mlp"
layer {{ name: "data" type: "HDF5Data" top: "data" top: "label"
  hdf5_data_param {{ source: "train.txt" batch_size: {batch} }} }}
layer {{ name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
  inner_product_param {{ num_output: 20 weight_filler {{ type: "xavier" }}
    bias_filler {{ type: "constant" value: 0.1 }} }} }}
layer {{ name: "relu" type: "ReLU" bottom: "ip1" top: "ip1" }}
layer {{ name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  inner_product_param {{ num_output: 3 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }}
"""
SOLVER = """net: "net{batch}.prototxt"
base_lr: 0.1 momentum: 0.9 weight_decay: 0.001 lr_policy: "fixed" clip_gradients: 0.5
display: {display} max_iter: {max_iter} snapshot: {snapshot} snapshot_prefix: "{prefix}"
random_seed: 7
"""
SHARED_MEMORY = "/dev/shm"
MPICH_SEGMENT = re.compile(r"mpich_shm_\w+$")
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which(
    "mpiexec")


def need_mpi():
    """Skip (saying why) where mpi4py or mpiexec is missing; the test extra installs both."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("mpi4py is not installed (pip install -e '.[mpi]' or '.[test]')")
    if MPIEXEC is None:
        pytest.skip("no mpiexec (the mpich wheel of the mpi extra provides one)")


def make_job(folder, batch, max_iter=20, snapshot=10, display=5, prefix=None):
    """Write the data and net/solver for ``batch``; return the solver's path."""
    folder = str(folder)
    if not os.path.exists(os.path.join(folder, "train.h5")):
        rng = np.random.default_rng(0)
        x = rng.normal(size=(64, 12)).astype(np.float32)
        y = (x[:, :3].sum(1) > 0).astype(np.float32) + (x[:, 3] > 0.5)
        with h5py.File(os.path.join(folder, "train.h5"), "w") as stream:
            stream["data"], stream["label"] = x, y
        with open(os.path.join(folder, "train.txt"), "w") as stream:
            stream.write("train.h5\n")
    prefix = prefix or f"out{batch}/mlp"
    os.makedirs(os.path.join(folder, os.path.dirname(prefix)), exist_ok=True)
    with open(os.path.join(folder, f"net{batch}.prototxt"), "w") as stream:
        stream.write(NET.format(batch=batch))
    path = os.path.join(folder, f"solver{batch}_{prefix.split('/')[0]}.prototxt")
    with open(path, "w") as stream:
        stream.write(SOLVER.format(batch=batch, max_iter=max_iter, snapshot=snapshot,
                                   display=display, prefix=prefix))
    return path


def weights(path):
    """{(layer, index): float32 array} of a .caffemodel."""
    model = caffe_pb2.NetParameter()
    with open(path, "rb") as stream:
        model.ParseFromString(stream.read())
    return {(layer.name, i): np.array(blob.data, np.float32)
            for layer in model.layer for i, blob in enumerate(layer.blobs)}


def max_relative_difference(a, b):
    return max(float(np.max(np.abs(a[k] - b[k]) / np.maximum(np.abs(b[k]), 1e-3))) for k in a)


def pycaffe(*args, cwd, ranks=1, timeout=60, **options):
    """Run ``pycaffe`` (under ``mpiexec -n ranks`` when ranks > 1); a CompletedProcess."""
    command = [sys.executable, "-m", "pycaffe_cli", *args]
    if ranks > 1:
        command = [MPIEXEC, "-n", str(ranks), *command]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=child_env(), **options)


def child_env():
    """The environment for a child pycaffe: this checkout first on the path; CPU only."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def messages(stderr):
    """The log messages without their glog prefix."""
    return [line.split("] ", 1)[1] if re.match(r"[IWEF]\d{4} ", line) else line
            for line in stderr.splitlines()]


def mpich_segments():
    """The names of MPICH's shared-memory segments in /dev/shm (none where there is none)."""
    try:
        return {name for name in os.listdir(SHARED_MEMORY) if MPICH_SEGMENT.match(name)}
    except OSError:
        return set()


def remove_orphaned_segments(before, patience=3.0):
    """Remove the MPICH segments made since ``before`` that no process maps. A rank killed
    by a signal or by MPI_Abort never unlinks its segment (2 MB of memory each). Ranks may
    take a moment to exit, so a mapped segment is looked at again for ``patience`` seconds;
    one still mapped after that belongs to a run in progress (another test's) and stays."""
    left = mpich_segments() - before
    deadline = time.monotonic() + patience
    while left:
        for name in left - _mapped(left):
            try:
                os.unlink(os.path.join(SHARED_MEMORY, name))
            except OSError:
                pass
        left = mpich_segments() & left
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.1)


def _mapped(names):
    """Those of ``names`` that some process has mapped."""
    mapped = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps", encoding="ascii", errors="replace") as maps:
                text = maps.read()
        except OSError:
            continue
        mapped.update(name for name in names if name in text)
    return mapped
