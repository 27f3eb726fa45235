"""HDF5 weights in Caffe's Net::ToHDF5 layout, and BlobProto <-> array conversion."""
import h5py
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.blob_proto import blob_proto_shape, blob_proto_to_array, fill_blob_proto
from pycaffe_cli.io.prototxt import write_binary_proto
from pycaffe_cli.io.weights import is_hdf5_weights, read_weights, write_hdf5_weights
from pycaffe_cli.proto import caffe_pb2

RNG = np.random.default_rng(7)
W1 = RNG.standard_normal((4, 3, 2, 2)).astype(np.float32)
B1 = RNG.standard_normal(4).astype(np.float32)
W2 = RNG.standard_normal((5, 16)).astype(np.float32)


def net_layers(write_diff):
    """conv1 owns W1, B1; ip_shared shares conv-like W2 from ip (param 0) and owns its bias."""
    diff = (lambda a: a * 10) if write_diff else (lambda a: None)
    return [
        ("conv1", [(W1, diff(W1), True), (B1, diff(B1), True)]),
        ("relu1", []),
        ("ip", [(W2, diff(W2), True)]),
        ("ip_shared", [(W2, diff(W2 + 1), False), (B1[:2], diff(B1[:2]), True)]),
    ]


@pytest.mark.parametrize("name", ["w.h5", "w.caffemodel.h5"])
def test_hdf5_layout_matches_net_to_hdf5(tmp_path, name):
    path = str(tmp_path / name)
    write_hdf5_weights(path, net_layers(write_diff=True), write_diff=True)
    with h5py.File(path, "r") as handle:
        assert sorted(handle.keys()) == ["data", "diff"]
        assert sorted(handle["data"].keys()) == ["conv1", "ip", "ip_shared", "relu1"]
        assert sorted(handle["data/conv1"].keys()) == ["0", "1"]
        assert list(handle["data/relu1"].keys()) == []
        assert list(handle["data/ip_shared"].keys()) == ["1"]  # shared param 0 not stored
        assert sorted(handle["diff/ip_shared"].keys()) == ["0", "1"]  # diffs always written
        assert handle["data/conv1/0"].dtype == np.float32
        assert handle["data/conv1/0"].shape == (4, 3, 2, 2)
        np.testing.assert_array_equal(handle["diff/ip_shared/0"][()], (W2 + 1) * 10)
        np.testing.assert_array_equal(handle["diff/conv1/1"][()], B1 * 10)


def test_hdf5_round_trip(tmp_path):
    path = str(tmp_path / "w.h5")
    write_hdf5_weights(path, net_layers(write_diff=False), write_diff=False)
    with h5py.File(path, "r") as handle:
        assert list(handle.keys()) == ["data"]
    layers = dict(read_weights(path))
    assert list(layers) == ["conv1", "ip", "ip_shared", "relu1"]  # HDF5 name order
    np.testing.assert_array_equal(layers["conv1"][0], W1)
    np.testing.assert_array_equal(layers["conv1"][1], B1)
    np.testing.assert_array_equal(layers["ip"][0], W2)
    assert layers["relu1"] == []
    assert layers["ip_shared"][0] is None
    np.testing.assert_array_equal(layers["ip_shared"][1], B1[:2])


def test_hdf5_layer_names_with_slashes(tmp_path):
    path = str(tmp_path / "g.h5")
    layers = [("inception_3a/1x1", [(W2, None, True)]), ("inception_3a/relu_1x1", []),
              ("inception_3a/output", [])]
    write_hdf5_weights(path, layers, write_diff=False)
    read = dict(read_weights(path))
    assert sorted(read) == ["inception_3a/1x1", "inception_3a/output", "inception_3a/relu_1x1"]
    np.testing.assert_array_equal(read["inception_3a/1x1"][0], W2)


def test_hdf5_double_datasets_become_float32(tmp_path):
    path = str(tmp_path / "d.h5")
    with h5py.File(path, "w") as handle:
        handle.create_dataset("data/fc/0", data=np.array([0.1, 0.2]))
    [(name, [array])] = read_weights(path)
    assert name == "fc" and array.dtype == np.float32
    np.testing.assert_array_equal(array, np.array([0.1, 0.2], np.float32))


def test_hdf5_errors(tmp_path):
    with pytest.raises(CaffeError, match="cannot read weights file '.*gone.h5': No such file"):
        read_weights(str(tmp_path / "gone.h5"))
    not_hdf5 = tmp_path / "text.h5"
    not_hdf5.write_text("hello")
    with pytest.raises(CaffeError, match="is not a valid HDF5 weights file"):
        read_weights(str(not_hdf5))
    no_data = str(tmp_path / "nodata.h5")
    with h5py.File(no_data, "w") as handle:
        handle.create_group("weights")
    with pytest.raises(CaffeError, match="has no 'data' group"):
        read_weights(no_data)
    ints = str(tmp_path / "ints.h5")
    with h5py.File(ints, "w") as handle:
        handle.create_dataset("data/fc/0", data=np.arange(3))
    with pytest.raises(CaffeError, match="expected float or double data"):
        read_weights(ints)


def test_duplicate_layer_names_refused(tmp_path):
    path = tmp_path / "dup.h5"
    with pytest.raises(CaffeError, match="two layers are named 'a'"):
        write_hdf5_weights(str(path), [("a", []), ("a", [])], write_diff=False)
    assert not path.exists()


def test_hdf5_recognised_by_signature(tmp_path):
    path = str(tmp_path / "snapshot_iter_10.weights")
    write_hdf5_weights(path, [("fc", [(B1, None, True)])], write_diff=False)
    assert is_hdf5_weights(path)
    np.testing.assert_array_equal(read_weights(path)[0][1][0], B1)


def test_caffemodel_round_trip(tmp_path):
    net = caffe_pb2.NetParameter(name="n")
    for name, params in net_layers(write_diff=False):
        layer = net.layer.add(name=name)
        for data, _, _ in params:
            fill_blob_proto(layer.blobs.add(), data)
    path = str(tmp_path / "n.caffemodel")
    write_binary_proto(path, net)
    assert not is_hdf5_weights(path)
    layers = read_weights(path)
    assert [name for name, _ in layers] == ["conv1", "relu1", "ip", "ip_shared"]
    np.testing.assert_array_equal(layers[0][1][0], W1)
    np.testing.assert_array_equal(layers[3][1][0], W2)


@pytest.mark.parametrize("shape", [(), (0,), (7,), (2, 3), (2, 1, 3, 4), (1, 2, 1, 2, 1)])
def test_fill_blob_proto_round_trip(shape):
    data = RNG.standard_normal(shape).astype(np.float32)
    diff = RNG.standard_normal(shape).astype(np.float32)
    proto = fill_blob_proto(caffe_pb2.BlobProto(), data, diff)
    assert blob_proto_shape(proto) == shape
    assert list(proto.data) == data.ravel().tolist()
    assert list(proto.diff) == diff.ravel().tolist()
    out = blob_proto_to_array(proto)
    assert out.dtype == np.float32 and out.shape == shape
    np.testing.assert_array_equal(out, data)
    np.testing.assert_array_equal(blob_proto_to_array(proto, diff=True), diff)


def test_fill_blob_proto_replaces_everything():
    proto = caffe_pb2.BlobProto(num=1, channels=1, height=2, width=2)
    proto.double_data.extend([1.0, 2.0, 3.0, 4.0])
    proto.data.extend([9.0])
    fill_blob_proto(proto, np.array([1.5, 2.5], np.float64))
    assert proto == caffe_pb2.BlobProto(shape=caffe_pb2.BlobShape(dim=[2]), data=[1.5, 2.5])


def test_blob_proto_special_values_are_bit_exact():
    data = np.array([np.inf, -np.inf, -0.0, 1e-45, np.finfo(np.float32).max], np.float32)
    out = blob_proto_to_array(fill_blob_proto(caffe_pb2.BlobProto(), data))
    assert out.tobytes() == data.tobytes()
    nan = blob_proto_to_array(fill_blob_proto(caffe_pb2.BlobProto(), np.array([np.nan])))
    assert np.isnan(nan[0])


def test_legacy_shape_wins_over_shape():
    proto = caffe_pb2.BlobProto(num=2, shape=caffe_pb2.BlobShape(dim=[6]))
    assert blob_proto_shape(proto) == (2, 0, 0, 0)
    proto = caffe_pb2.BlobProto(channels=3, height=1, width=2)
    proto.data.extend([1, 2, 3, 4, 5, 6])
    assert blob_proto_shape(proto) == (0, 3, 1, 2)
    with pytest.raises(CaffeError, match=r"shape 0 3 1 2 \(0\) holds 6 data values"):
        blob_proto_to_array(proto)
