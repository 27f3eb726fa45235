"""Blob: shapes, Caffe's capacity rule, sharing, protobuf round trips."""
import numpy as np
import pytest

from pycaffe_cli.blob import Blob
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.proto import caffe_pb2


def test_shape_count_and_legacy_accessors():
    blob = Blob((2, 3, 4, 5))
    assert blob.count() == 120 and blob.count(1) == 60 and blob.count(1, 3) == 12
    assert (blob.num, blob.channels, blob.height, blob.width) == (2, 3, 4, 5)
    assert blob.shape_string() == "2 3 4 5 (120)"
    small = Blob((7,))
    assert (small.num, small.channels, small.height) == (7, 1, 1)
    assert blob.canonical_axis_index(-1) == 3
    with pytest.raises(CaffeError, match="axis 4 out of range"):
        blob.canonical_axis_index(4)


def test_scalar_blob_has_count_one():
    blob = Blob(())
    assert blob.count() == 1 and blob.data.shape == ()


def test_reshape_keeps_storage_within_capacity():
    blob = Blob((4, 5))
    blob.data[...] = np.arange(20).reshape(4, 5)
    blob.reshape((2, 5))
    np.testing.assert_array_equal(blob.data, np.arange(10).reshape(2, 5))
    blob.reshape((5, 4))
    np.testing.assert_array_equal(blob.flat_data, np.arange(20))


def test_share_data_and_update():
    a, b = Blob((3,)), Blob((3,))
    b.share_data(a)
    a.data[...] = [1, 2, 3]
    np.testing.assert_array_equal(b.data, [1, 2, 3])
    a.diff[...] = [0.5, 0.5, 0.5]
    a.update()
    np.testing.assert_array_equal(b.data, [0.5, 1.5, 2.5])
    with pytest.raises(CaffeError):
        Blob((4,)).share_data(a)


def test_proto_round_trip_and_legacy_shape():
    blob = Blob((2, 3))
    blob.data[...] = np.arange(6).reshape(2, 3) / 7
    blob.diff[...] = -1
    proto = blob.to_proto(caffe_pb2.BlobProto(), write_diff=True)
    assert list(proto.shape.dim) == [2, 3] and len(proto.diff) == 6
    copy = Blob()
    copy.from_proto(proto)
    np.testing.assert_array_equal(copy.data, blob.data)
    np.testing.assert_array_equal(copy.diff, blob.diff)
    legacy = caffe_pb2.BlobProto(num=1, channels=1, height=2, width=3,
                                 double_data=[1, 2, 3, 4, 5, 6])
    target = Blob((2, 3))
    assert target.shape_equals(legacy)
    target.from_proto(legacy, reshape=False)
    np.testing.assert_array_equal(target.data, [[1, 2, 3], [4, 5, 6]])
    with pytest.raises(CaffeError, match="shape mismatch"):
        Blob((3, 2)).from_proto(legacy, reshape=False)


@pytest.mark.parametrize("shape, error, message", [
    ((1.5, 2), TypeError, r"blob dimensions must be integers, got 1.5 in \(1.5, 2\)"),
    ((2.0,), TypeError, "got 2.0"),
    ((True, 2), TypeError, "got True"),
    ((np.float32(3),), TypeError, "got np.float32"),
    (("3",), TypeError, "got '3'"),
    ((2, -3), CaffeError, r"blob shape \(2, -3\) has a negative dimension -3"),
    ((2, -3), ValueError, "negative dimension -3"),
])
def test_reshape_refuses_dimensions_that_are_not_sizes(shape, error, message):
    blob = Blob((4,))
    with pytest.raises(error, match=message):
        blob.reshape(shape)
    assert blob.shape == (4,)


def test_reshape_takes_numpy_integers():
    blob = Blob((np.int64(2), np.int32(3)))
    blob.reshape(np.array([3, 1]))
    assert blob.shape == (3, 1) and all(type(d) is int for d in blob.shape)
