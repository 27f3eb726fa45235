"""NaN and inf in weights, means, data or computations: ``pycaffe test`` and ``pycaffe time``
go on, as Caffe does, but say where the NaN comes from.

One WARNING names the file whose values are not finite when it is loaded (weights, mean);
one names the first layer whose output is NaN or inf (commands/non_finite.py). numpy's own
"RuntimeWarning: invalid value encountered in matmul" lines never reach the user of the
command line, and the filter that hides them is gone once ``main`` returns.
"""
import warnings

import h5py
import lmdb
import numpy as np
import pytest

from pycaffe_cli.io.blob_proto import fill_blob_proto
from pycaffe_cli.io.prototxt import write_blob_proto
from pycaffe_cli.net.net import Net
from pycaffe_cli.net.weights import save_binaryproto, save_hdf5
from pycaffe_cli.proto import caffe_pb2
from tests.gpu_helpers import DEVICES

IP_NET = """\
name: "tiny"
layer { name: "data" type: "HDF5Data" top: "data" top: "label"
  hdf5_data_param { source: "SOURCE" batch_size: 2 } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 1 } } }
layer { name: "relu" type: "ReLU" bottom: "ip" top: "ip" }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


@pytest.fixture(autouse=True)
def no_runtime_warnings():
    """pytest records warnings instead of printing them: record them here, and check that
    none of numpy's got past the command line's filter."""
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        yield
    assert [str(w.message) for w in records if w.category is RuntimeWarning] == []


def warnings_about(result, words):
    return [m for m in result.messages if words in m]


def layer_warnings(result):
    return warnings_about(result, "the net computes NaN or inf")


def assert_quiet(result):
    """Exit 0, no error line, no Python warning or traceback on stderr."""
    assert result.code == 0, result.err
    assert result.error_lines() == []
    assert "RuntimeWarning" not in result.err and "Traceback" not in result.err


@pytest.fixture
def h5_source(write, tmp_path):
    """A function writing an HDF5Data source of 4 rows (``nan_row`` set to NaN) and the
    list naming it; returns the list file's path."""
    def make(nan_row=None, name="rows.h5"):
        data = np.random.default_rng(0).random((4, 3), dtype=np.float32)
        if nan_row is not None:
            data[nan_row, 1] = np.nan
        with h5py.File(tmp_path / name, "w") as handle:
            handle["data"] = data
            handle["label"] = np.array([0, 1, 0, 1], np.float32)
        return write(f"{name}.txt", f"{tmp_path / name}\n")
    return make


@pytest.fixture
def model(write, h5_source):
    return write("net.prototxt", IP_NET.replace("SOURCE", h5_source()))


def weights_with(model, tmp_path, value, name, save=save_binaryproto):
    """A weights file for ``model`` whose first InnerProduct weight row is ``value``, the
    second ``-value`` (so that inf meets -inf in the product: NaN)."""
    net = Net.from_file(model, caffe_pb2.TEST)
    weights = net.layer_by_name("ip").blobs[0].data
    weights[0, :] = value
    weights[1, :] = -value
    path = str(tmp_path / name)
    save(net, path)
    return path


# --- weights ------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("plan", ["--inference_plan", "--noinference_plan"])
@pytest.mark.parametrize("value, save, name", [
    (np.nan, save_binaryproto, "nan.caffemodel"),
    (np.inf, save_hdf5, "inf.caffemodel.h5"),
])
def test_test_with_non_finite_weights(run_cli, model, tmp_path, plan, value, save, name,
                                      device):
    weights = weights_with(model, tmp_path, value, name, save)
    result = run_cli("test", "--model", model, "--weights", weights, "--iterations", 2, plan,
                     *device)
    assert_quiet(result)
    [file_warning] = warnings_about(result, f"weights file '{weights}'")
    assert "layer ip param 0 holds 6 NaN or inf values of 6" in file_warning
    [layer_warning] = layer_warnings(result)
    assert layer_warning.startswith("Batch 0: ")
    assert 'layer "ip" (type InnerProduct) is the first' in layer_warning
    assert "its own weights are NaN or inf" in layer_warning
    assert "Loss: nan" in result.messages


def test_finite_weights_give_no_warning(run_cli, model, tmp_path):
    weights = weights_with(model, tmp_path, 0.5, "fine.caffemodel")
    result = run_cli("test", "--model", model, "--weights", weights, "--iterations", 2)
    assert_quiet(result)
    assert not [m for m in result.messages if "NaN" in m]


def test_train_names_the_weights_file(run_cli, write, model, tmp_path):
    weights = weights_with(model, tmp_path, np.nan, "nan.caffemodel")
    write("train.prototxt", open(model).read())
    solver = write("solver.prototxt", f"""\
        net: "{tmp_path / 'train.prototxt'}"
        base_lr: 0.01 lr_policy: "fixed" max_iter: 2 display: 1
        snapshot_prefix: "{tmp_path / 'snap'}"
        """)
    result = run_cli("train", "--solver", solver, "--weights", weights)
    assert_quiet(result)
    assert len(warnings_about(result, f"weights file '{weights}'")) == 1
    assert len(warnings_about(result, "training diverged")) == 1


# --- data and means -------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["test", "time"])
def test_nan_data_names_the_data_layer(run_cli, write, h5_source, tmp_path, command):
    """Row 2 is NaN: the second batch (the first for time, which starts again) is."""
    model = write("net.prototxt", IP_NET.replace("SOURCE", h5_source(nan_row=0)))
    if command == "test":
        weights = weights_with(model, tmp_path, 0.5, "fine.caffemodel")
        result = run_cli("test", "--model", model, "--weights", weights, "--iterations", 4)
    else:
        result = run_cli("time", "--model", model, "--iterations", 2)
    assert_quiet(result)
    [warning] = layer_warnings(result)
    assert warning.startswith("Batch 0: " if command == "test" else "Initial forward pass: ")
    assert 'layer "data" (type HDF5Data) is the first whose output ("data")' in warning
    assert ("Testing" if command == "test" else "Timing") + " goes on" in warning


def write_lmdb(path, count=4, shape=(1, 2, 3)):
    env = lmdb.open(str(path), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i in range(count):
            datum = caffe_pb2.Datum(channels=shape[0], height=shape[1], width=shape[2],
                                    data=bytes(range(i, i + int(np.prod(shape)))), label=i % 2)
            txn.put(f"{i:08d}".encode(), datum.SerializeToString())
    env.close()
    return str(path)


@pytest.mark.parametrize("command", ["test", "time"])
def test_nan_mean_file(run_cli, write, tmp_path, command):
    mean = np.zeros((1, 1, 2, 3), np.float32)
    mean[0, 0, 1, 2] = np.nan
    mean_file = str(tmp_path / "mean.binaryproto")
    write_blob_proto(mean_file, fill_blob_proto(caffe_pb2.BlobProto(), mean))
    source = write_lmdb(tmp_path / "db")
    model = write("net.prototxt", IP_NET.replace(
        'type: "HDF5Data"', 'type: "Data"').replace(
        'hdf5_data_param { source: "SOURCE" batch_size: 2 }',
        f'data_param {{ source: "{source}" backend: LMDB batch_size: 2 }} '
        f'transform_param {{ mean_file: "{mean_file}" }}'))
    if command == "test":
        weights = weights_with(model, tmp_path, 0.5, "fine.caffemodel")
        result = run_cli("test", "--model", model, "--weights", weights, "--iterations", 2)
    else:
        result = run_cli("time", "--model", model, "--iterations", 1)
    assert_quiet(result)
    [file_warning] = warnings_about(result, f"mean file '{mean_file}'")
    assert 'layer "data"' in file_warning and "1 NaN or inf values of 6" in file_warning
    [warning] = layer_warnings(result)
    assert 'layer "data" (type Data) is the first' in warning


# --- computations -----------------------------------------------------------------------------

LOG_NET = """\
name: "logs"
layer { name: "input" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "shift" type: "Power" bottom: "x" top: "y" power_param { shift: -1 } }
layer { name: "log" type: "Log" bottom: "y" top: "z" }
layer { name: "ip" type: "InnerProduct" bottom: "z" top: "out"
  inner_product_param { num_output: 2 weight_filler { type: "constant" value: 1 } } }
"""


@pytest.mark.parametrize("phase", ["TRAIN", "TEST"])
def test_time_names_the_layer_that_computes_nan(run_cli, write, phase):
    """log(0 - 1) is NaN: the Log layer is named, not the InnerProduct after it, and numpy's
    "invalid value encountered in log" is not printed."""
    model = write("logs.prototxt", LOG_NET)
    result = run_cli("time", "--model", model, "--iterations", 1, "--phase", phase)
    assert_quiet(result)
    [warning] = layer_warnings(result)
    assert 'layer "log" (type Log) is the first whose output ("z") is NaN or inf' in warning


FOLD_NET = """\
name: "folds"
layer { name: "data" type: "Input" top: "data"
  input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "c1"
  convolution_param { num_output: 4 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" }
                      bias_filler { type: "constant" value: 1 } } }
layer { name: "bn1" type: "BatchNorm" bottom: "c1" top: "c1" }
layer { name: "sc1" type: "Scale" bottom: "c1" top: "c1" scale_param { bias_term: true } }
layer { name: "relu1" type: "ReLU" bottom: "c1" top: "c1" }
layer { name: "conv2" type: "Convolution" bottom: "c1" top: "c2"
  convolution_param { num_output: 4 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" } } }
layer { name: "relu2" type: "ReLU" bottom: "c2" top: "c2" }
layer { name: "pool" type: "Pooling" bottom: "c2" top: "p"
  pooling_param { pool: MAX kernel_size: 2 } }
layer { name: "conv3" type: "Convolution" bottom: "p" top: "c3"
  convolution_param { num_output: 4 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" } } }
layer { name: "ip" type: "InnerProduct" bottom: "c3" top: "out"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" } } }
"""


def test_the_inference_plan_shares_memory_yet_the_layer_is_found(run_cli, write, tmp_path):
    """BatchNorm/Scale folded, ReLUs fused, blobs in shared buffers: conv2 is still named
    (a scan of the tops after the pass could find another layer's values there)."""
    model = write("folds.prototxt", FOLD_NET)
    net = Net.from_file(model, caffe_pb2.TEST)
    batch_norm = net.layer_by_name("bn1")
    for blob, value in zip(batch_norm.blobs, (0, 1, 1)):
        blob.data[...] = value
    net.layer_by_name("conv2").blobs[0].data[1, 0, 0, 0] = np.nan
    weights = str(tmp_path / "folds.caffemodel")
    save_binaryproto(net, weights)
    result = run_cli("test", "--model", model, "--weights", weights, "--iterations", 2)
    assert_quiet(result)
    assert any("blobs share" in m for m in result.messages)
    [warning] = layer_warnings(result)
    assert 'layer "conv2" (type Convolution) is the first whose output ("c2")' in warning


def test_reported_once(run_cli, model, tmp_path):
    weights = weights_with(model, tmp_path, np.nan, "nan.caffemodel")
    result = run_cli("test", "--model", model, "--weights", weights, "--iterations", 6)
    assert_quiet(result)
    assert len(layer_warnings(result)) == 1


# --- numpy's warnings -----------------------------------------------------------------------

def test_numpy_warnings_are_hidden_only_while_the_command_runs(run_cli, write):
    model = write("logs.prototxt", LOG_NET)
    before = list(warnings.filters)
    result = run_cli("time", "--model", model, "--iterations", 1)
    assert_quiet(result)
    assert warnings.filters == before
    with pytest.warns(RuntimeWarning, match="invalid value encountered in log"):
        np.log(np.array([-1.0]))
