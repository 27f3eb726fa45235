"""``pycaffe extract_features``: one Datum per item per blob, Caffe's keys, logs and errors."""
import os

import numpy as np
import pytest

from pycaffe_cli.net.net import Net
from pycaffe_cli.net.weights import save_binaryproto
from pycaffe_cli.proto import caffe_pb2
from tests.db_helpers import read_db

# A batch of 3 random 2x2x2 "images" each forward (a fresh draw every pass), a 4-way
# InnerProduct over them, and a scalar top.
NET = """\
name: "features"
layer {
  name: "data" type: "DummyData" top: "data" top: "one"
  dummy_data_param {
    shape { dim: 3 dim: 2 dim: 2 dim: 2 } shape { dim: 1 }
    data_filler { type: "uniform" min: -1 max: 1 }
    data_filler { type: "constant" value: 1 }
  }
}
layer {
  name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 1 }
                        bias_filler { type: "gaussian" std: 1 } }
}
layer { name: "silence" type: "Silence" bottom: "one" }
"""


@pytest.fixture
def model(write, tmp_path):
    """(prototxt, caffemodel, W, b): random weights drawn by the engine and saved."""
    proto = write("features.prototxt", NET)
    net = Net.from_file(proto, caffe_pb2.TEST)
    weights = str(tmp_path / "features.caffemodel")
    save_binaryproto(net, weights)
    ip = net.layer_by_name("ip")
    return proto, weights, ip.blobs[0].data.copy(), ip.blobs[1].data.copy()


def floats(datum):
    return np.array(datum.float_data, np.float32)


# The default mode (CPU), and GPU [DEVICE_ID].
MODES = [pytest.param([], id="default"),
         pytest.param(["GPU", "0"], id="gpu", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("mode", MODES)
def test_items_keys_shapes_and_values(run_cli, model, tmp_path, mode):
    proto, weights, w, b = model
    data_db, ip_db = tmp_path / "data_db", tmp_path / "ip_db"
    result = run_cli("extract_features", weights, proto, "data,ip", f"{data_db},{ip_db}", 2,
                     "lmdb", *mode)
    assert result.code == 0, result.err
    if mode:
        assert result.messages[:2] == ["Using GPU", "Using Device_id=0"]
    data_items, ip_items = read_db(data_db), read_db(ip_db)
    # 2 batches of 3 items; Caffe's keys are the running index, 10 digits zero-padded
    assert [key for key, _ in data_items] == [f"{i:010d}" for i in range(6)]
    assert [key for key, _ in ip_items] == [f"{i:010d}" for i in range(6)]
    for _, datum in data_items:
        assert (datum.channels, datum.height, datum.width) == (2, 2, 2)
        assert not datum.HasField("data") and not datum.HasField("label")
    for _, datum in ip_items:  # a 2-d (N, 4) blob: channels 4, missing axes count as 1
        assert (datum.channels, datum.height, datum.width) == (4, 1, 1)
    inputs = np.stack([floats(d) for _, d in data_items])
    assert inputs.shape == (6, 8) and np.all(np.abs(inputs) <= 1)
    assert not np.allclose(inputs[:3], inputs[3:])  # each batch is a fresh draw
    expected = inputs @ w.T + b
    np.testing.assert_allclose(np.stack([floats(d) for _, d in ip_items]), expected,
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode, first", [
    pytest.param(["CPU"], ["Using CPU"], id="cpu"),
    pytest.param(["GPU", "0"], ["Using GPU", "Using Device_id=0"], id="gpu",
                 marks=pytest.mark.gpu)])
def test_log_lines(run_cli, model, tmp_path, mode, first):
    proto, weights, _, _ = model
    db = tmp_path / "ip_db"
    result = run_cli("extract_features", weights, proto, "ip", db, 3, "lmdb", *mode)
    assert result.code == 0, result.err
    lines = [line for line in result.err.splitlines() if line[:1] == "E"]
    messages = [line.split("] ", 1)[1] for line in lines]
    assert messages == first + ["Extacting Features",
                                "Extracted features of 9 query images for feature blob ip",
                                "Successfully extracted the features!"]
    assert f"Opening dataset {db}" in result.messages


def test_commits_and_logs_every_thousand(run_cli, write, tmp_path):
    big = NET.replace("dim: 3 dim: 2 dim: 2 dim: 2", "dim: 700 dim: 1")
    proto = write("big.prototxt", big)
    weights = str(tmp_path / "big.caffemodel")
    save_binaryproto(Net.from_file(proto, caffe_pb2.TEST), weights)
    result = run_cli("extract_features", weights, proto, "data", tmp_path / "db", 3, "lmdb")
    assert result.code == 0, result.err
    counts = [m for m in result.messages if m.startswith("Extracted features of")]
    assert counts == ["Extracted features of 1000 query images for feature blob data",
                      "Extracted features of 2000 query images for feature blob data",
                      "Extracted features of 2100 query images for feature blob data"]
    items = read_db(tmp_path / "db")
    assert len(items) == 2100 and items[-1][0] == "0000002099"
    assert (items[0][1].channels, items[0][1].height, items[0][1].width) == (1, 1, 1)


def test_scalar_blob_and_zero_batches(run_cli, model, tmp_path):
    proto, weights, _, _ = model
    result = run_cli("extract_features", weights, proto, "one,ip",
                     f"{tmp_path / 'one'},{tmp_path / 'none'}", 0, "lmdb")
    assert result.code == 0, result.err
    assert read_db(tmp_path / "one") == [] and read_db(tmp_path / "none") == []
    result = run_cli("extract_features", weights, proto, "one", tmp_path / "one2", 2, "lmdb")
    items = read_db(tmp_path / "one2")
    assert [(k, floats(d).tolist(), d.channels) for k, d in items] == [
        ("0000000000", [1.0], 1), ("0000000001", [1.0], 1)]


@pytest.mark.parametrize("args, message", [
    (("nope", "db"), 'Unknown feature blob name "nope" in the network'),
    (("data,ip", "db"), "the number of blob names (2) and dataset names (1) must be equal"),
    (("data", "db,db2"), "the number of blob names (1) and dataset names (2) must be equal"),
    (("data,ip", "db,db"), "dataset 'db' is named twice"),
])
def test_name_errors(run_cli, model, tmp_path, args, message):
    proto, weights, _, _ = model
    names, dbs = args
    dbs = ",".join(str(tmp_path / d) for d in dbs.split(","))
    message = message.replace("'db'", f"'{tmp_path / 'db'}'")
    result = run_cli("extract_features", weights, proto, names, dbs, 1, "lmdb")
    assert result.code == 1
    assert len(result.error_lines()) == 1 and message in result.error_lines()[0]
    assert sorted(os.listdir(tmp_path)) == ["features.caffemodel", "features.prototxt"]


@pytest.mark.parametrize("tail, message", [
    (("x", "lmdb"), 'NUM_MINI_BATCHES must be a non-negative integer, not "x"'),
    (("2.5", "lmdb"), 'NUM_MINI_BATCHES must be a non-negative integer, not "2.5"'),
    (("--", "-1", "lmdb"), 'NUM_MINI_BATCHES must be a non-negative integer, not "-1"'),
    (("1", "rocksdb"), 'unknown database backend "rocksdb"'),
    (("1", "lmdb", "TPU"), 'MODE must be CPU or GPU, not "TPU"'),
    (("1", "lmdb", "GPU", "zero"), 'DEVICE_ID must be a non-negative integer, not "zero"'),
])
def test_argument_errors(run_cli, model, tmp_path, tail, message):
    proto, weights, _, _ = model
    db = tmp_path / "db"
    if tail[0] == "--":  # a negative number reads as a flag unless "--" comes first
        result = run_cli("extract_features", "--", weights, proto, "ip", db, *tail[1:])
    else:
        result = run_cli("extract_features", weights, proto, "ip", db, *tail)
    assert result.code == 1
    assert len(result.error_lines()) == 1 and message in result.error_lines()[0]
    assert not (tmp_path / "db").exists()


def test_existing_database_is_refused_and_left_alone(run_cli, model, tmp_path):
    proto, weights, _, _ = model
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("keep")
    result = run_cli("extract_features", weights, proto, "data,ip",
                     f"{tmp_path / 'fresh'},{tmp_path / 'taken'}", 1, "lmdb")
    assert result.code == 1
    assert "cannot create database" in result.error_lines()[0]
    assert "already exists" in result.error_lines()[0]
    assert not (tmp_path / "fresh").exists()
    assert os.listdir(tmp_path / "taken") == ["mine.txt"]


def test_failure_mid_run_leaves_no_database(run_cli, write, tmp_path):
    """A forward pass that fails (an HDF5 source that is not there) removes every output."""
    proto = write("bad.prototxt", NET + """
layer { name: "h5" type: "HDF5Data" top: "x" hdf5_data_param { source: "LIST" batch_size: 1 } }
""".replace("LIST", str(tmp_path / "list.txt")))
    (tmp_path / "list.txt").write_text(str(tmp_path / "missing.h5") + "\n")
    result = run_cli("extract_features", str(tmp_path / "none.caffemodel"), proto, "ip",
                     tmp_path / "db", 1, "lmdb")
    assert result.code == 1 and len(result.error_lines()) == 1
    leftovers = [name for name in os.listdir(tmp_path) if "db" in name]
    assert leftovers == []


def test_weights_are_loaded(run_cli, model, tmp_path):
    """The features come from the saved weights, not a fresh initialisation."""
    proto, weights, w, b = model
    zeros = caffe_pb2.NetParameter()
    with open(weights, "rb") as stream:
        zeros.ParseFromString(stream.read())
    for layer in zeros.layer:
        for blob in layer.blobs:
            blob.data[:] = [0.0] * len(blob.data)
        if layer.name == "ip":
            layer.blobs[1].data[:] = [0.25, 0.5, 0.75, 1.0]
    zero_weights = tmp_path / "zero.caffemodel"
    zero_weights.write_bytes(zeros.SerializeToString())
    result = run_cli("extract_features", zero_weights, proto, "ip", tmp_path / "db", 1, "lmdb")
    assert result.code == 0, result.err
    for _, datum in read_db(tmp_path / "db"):
        assert floats(datum).tolist() == [0.25, 0.5, 0.75, 1.0]


def test_leveldb(run_cli, model, tmp_path):
    """LevelDB works where the optional plyvel package is installed; otherwise one clear
    error line and nothing written."""
    proto, weights, _, _ = model
    result = run_cli("extract_features", weights, proto, "ip", tmp_path / "db", 1, "leveldb")
    try:
        import plyvel  # noqa: F401
    except ImportError:
        assert result.code == 1
        assert "needs the optional 'plyvel' package" in result.error_lines()[0]
        assert sorted(os.listdir(tmp_path)) == ["features.caffemodel", "features.prototxt"]
        return
    assert result.code == 0, result.err
    from pycaffe_cli.data import db
    database = db.open_db(str(tmp_path / "db"), caffe_pb2.DataParameter.LEVELDB)
    cursor, keys = database.cursor(), []
    while cursor.valid():
        keys.append(cursor.key())
        cursor.next()
    database.close()
    assert keys == [b"0000000000", b"0000000001", b"0000000002"]


def test_blob_of_more_than_four_axes_is_refused(run_cli, write, tmp_path):
    proto = write("five.prototxt", """
    layer { name: "data" type: "DummyData" top: "data"
      dummy_data_param { shape { dim: 1 dim: 2 dim: 1 dim: 1 dim: 2 } } }
    """)
    weights = str(tmp_path / "five.caffemodel")
    save_binaryproto(Net.from_file(proto, caffe_pb2.TEST), weights)
    result = run_cli("extract_features", weights, proto, "data", tmp_path / "db", 1, "lmdb")
    assert result.code == 1
    assert 'blob "data" has 5 axes; a Datum holds at most 4' in result.error_lines()[0]
    assert not (tmp_path / "db").exists()
