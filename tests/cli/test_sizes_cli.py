"""Impossible sizes, in-place misuse, memory errors and huge nets through ``pycaffe``: one
error line naming the layer and the memory it needs, no traceback, no hang."""
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from pycaffe_cli.data.db import open_db
from pycaffe_cli.layers.base import layer_class
from pycaffe_cli.proto import caffe_pb2

PYCAFFE = os.path.join(os.path.dirname(sys.executable), "pycaffe")
INPUT = 'layer { name: "in" type: "Input" top: "r" input_param { shape { dim: 2 dim: 100 } } }\n'


def one_error(result):
    """The single error line of a failed run (and no traceback)."""
    assert result.code == 1
    assert "Traceback" not in result.err
    lines = result.error_lines()
    assert len(lines) == 1 and result.err.rstrip().endswith(lines[0])
    return lines[0]


def test_huge_inner_product_names_layer_and_memory(run_cli, write):
    net = write("n.prototxt", INPUT + 'layer { name: "ip" type: "InnerProduct" bottom: "r" '
                                      'top: "y" inner_product_param { num_output: 1000000000 } }\n')
    line = one_error(run_cli("time", "--model", net, "--iterations", "1"))
    assert line == (f'pycaffe: error: {net}:2: layer "ip": InnerProduct: a blob of shape '
                    "1000000000 100 needs 372.5 GiB (100000000000 values), more than the "
                    "2147483647 values (INT_MAX) a Caffe blob can hold")


def test_hdf5_batch_size_over_int32(run_cli, write, tmp_path):
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f["data"] = np.zeros((3, 2), np.float32)
    listing = write("list.txt", f"{tmp_path / 'd.h5'}\n")
    net = write("n.prototxt", 'layer { name: "h5" type: "HDF5Data" top: "data" '
                              f'hdf5_data_param {{ source: "{listing}" '
                              "batch_size: 2147483648 } }\n")
    line = one_error(run_cli("time", "--model", net, "--iterations", "1"))
    assert f'{net}:1: layer "h5": HDF5Data: a blob of shape 2147483648 2 needs 16.0 GiB' in line


def test_in_place_inner_product_is_refused(run_cli, write):
    net = write("n.prototxt", INPUT + 'layer { name: "ip" type: "InnerProduct" bottom: "r" '
                                      'top: "r" inner_product_param { num_output: 3 } }\n')
    line = one_error(run_cli("time", "--model", net, "--iterations", "1"))
    assert line == (f'pycaffe: error: {net}:2: layer "ip": InnerProduct cannot run in place: '
                    'its top "r" is also its bottom (give the top a name of its own)')


def test_memory_error_while_training_is_one_line(run_cli, write, monkeypatch):
    net = write("n.prototxt", INPUT + 'layer { name: "relu" type: "ReLU" bottom: "r" top: "y" }\n')
    solver = write("s.prototxt", f'net: "{net}"\nbase_lr: 0.1\nlr_policy: "fixed"\n'
                                 "max_iter: 2\n")

    def no_memory(self, bottom, top):
        np.empty((1 << 40, 1 << 40), np.float32)   # what numpy cannot give
    monkeypatch.setattr(layer_class("ReLU"), "forward_cpu", no_memory)
    line = one_error(run_cli("train", "--solver", solver))
    assert line.startswith('pycaffe: error: layer "relu": ReLU: out of memory in forward '
                           "(array is too big")


def test_memory_error_outside_a_layer_is_one_line(run_cli, write, monkeypatch):
    from pycaffe_cli.net.net import Net

    def no_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 3.00 TiB")
    monkeypatch.setattr(Net, "from_file", no_memory)
    line = one_error(run_cli("time", "--model", write("n.prototxt", INPUT)))
    assert line == "pycaffe: error: out of memory (Unable to allocate 3.00 TiB)"


def run_pycaffe(args, cwd, timeout=120):
    return subprocess.run([PYCAFFE] + args, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_data_batch_size_over_int32_ends_without_hanging(tmp_path):
    """The prefetch thread must not start on an impossible batch: it kept the run alive."""
    db = open_db(str(tmp_path / "db"), caffe_pb2.DataParameter.LMDB, mode="new")
    txn = db.transaction()
    txn.put("0", caffe_pb2.Datum(channels=1, height=4, width=4, data=bytes(16)).SerializeToString())
    txn.commit()
    db.close()
    (tmp_path / "n.prototxt").write_text(
        'layer { name: "data" type: "Data" top: "data" data_param { source: "db" '
        "backend: LMDB batch_size: 2147483648 } }\n")
    run = run_pycaffe(["time", "--model", "n.prototxt", "--iterations", "1"], tmp_path, 60)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.rstrip().splitlines()[-1] == (
        'pycaffe: error: n.prototxt:1: layer "data": Data: a blob of shape 2147483648 1 4 4 '
        "needs 128.0 GiB (34359738368 values), more than the 2147483647 values (INT_MAX) a "
        "Caffe blob can hold")


@pytest.mark.slow
def test_a_net_of_100000_layers_runs_with_its_echo_capped(tmp_path):
    layers = ['layer { name: "in" type: "Input" top: "r0" input_param { shape { dim: 1 '
              "dim: 2 } } }"]
    layers += [f'layer {{ name: "relu{i}" type: "ReLU" bottom: "r{i - 1}" top: "r{i}" }}'
               for i in range(1, 100001)]
    (tmp_path / "big.prototxt").write_text("\n".join(layers) + "\n")
    run = run_pycaffe(["time", "--model", "big.prototxt", "--iterations", "1"], tmp_path, 300)
    assert run.returncode == 0, run.stderr[-2000:]
    head = run.stderr[:run.stderr.index("Creating Layer in")]
    assert len(head) < 300_000     # the net's text alone is 5 MB
    assert "# ... (98001 more layers not shown; 100001 in all)" in head
    assert "Total Time:" in run.stderr
