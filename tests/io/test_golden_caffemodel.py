"""Golden-file tests: .caffemodel bytes built by hand from Caffe's field numbers.

The files here are assembled with a tiny protobuf wire encoder that knows nothing of our
schema, using the field numbers published in BVLC Caffe's src/caffe/proto/caffe.proto:

    message NetParameter     { optional string name = 1; repeated V1LayerParameter layers = 2;
                               repeated LayerParameter layer = 100; }
    message LayerParameter   { optional string name = 1; optional string type = 2;
                               repeated BlobProto blobs = 7; }
    message V1LayerParameter { optional string name = 4; optional LayerType type = 5;
                               repeated BlobProto blobs = 6; }   // INNER_PRODUCT = 14
    message BlobShape        { repeated int64 dim = 1 [packed = true]; }
    message BlobProto        { optional BlobShape shape = 7;
                               repeated float data = 5 [packed = true];
                               repeated float diff = 6 [packed = true];
                               repeated double double_data = 8 [packed = true];
                               optional int64 num = 1; channels = 2; height = 3; width = 4; }

The reverse direction decodes what our caffe_pb2 writes with the test's own wire decoder.
"""
import struct

import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.blob_proto import fill_blob_proto
from pycaffe_cli.io.weights import read_weights
from pycaffe_cli.proto import caffe_pb2

NET_NAME, NET_LAYERS_V1, NET_LAYER = 1, 2, 100
LAYER_NAME, LAYER_TYPE, LAYER_BLOBS = 1, 2, 7
V1_NAME, V1_TYPE, V1_BLOBS, V1_INNER_PRODUCT = 4, 5, 6, 14
SHAPE_DIM = 1
BLOB_NUM, BLOB_CHANNELS, BLOB_HEIGHT, BLOB_WIDTH = 1, 2, 3, 4
BLOB_DATA, BLOB_DIFF, BLOB_SHAPE, BLOB_DOUBLE_DATA = 5, 6, 7, 8
VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5


# --- a minimal wire encoder ------------------------------------------------------------------
def varint(value):
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def key(field, wire_type):
    return varint(field << 3 | wire_type)


def length_delimited(field, payload):
    return key(field, LENGTH_DELIMITED) + varint(len(payload)) + payload


def string_field(field, text):
    return length_delimited(field, text.encode("utf-8"))


def varint_field(field, value):
    return key(field, VARINT) + varint(value)


def packed_floats(field, values):
    return length_delimited(field, struct.pack(f"<{len(values)}f", *values))


def packed_doubles(field, values):
    return length_delimited(field, struct.pack(f"<{len(values)}d", *values))


def packed_varints(field, values):
    return length_delimited(field, b"".join(varint(v) for v in values))


def blob_with_shape(dims, values):
    shape = packed_varints(SHAPE_DIM, dims)
    return length_delimited(BLOB_SHAPE, shape) + packed_floats(BLOB_DATA, values)


# --- a minimal wire decoder --------------------------------------------------------------------
def read_varint(data, pos):
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def decode(data):
    """[(field number, wire type, value)] where value is an int or the raw bytes."""
    fields, pos = [], 0
    while pos < len(data):
        tag, pos = read_varint(data, pos)
        field, wire_type = tag >> 3, tag & 7
        if wire_type == VARINT:
            value, pos = read_varint(data, pos)
        elif wire_type == LENGTH_DELIMITED:
            length, pos = read_varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        elif wire_type == FIXED32:
            value, pos = data[pos:pos + 4], pos + 4
        elif wire_type == FIXED64:
            value, pos = data[pos:pos + 8], pos + 8
        else:
            raise AssertionError(f"wire type {wire_type}")
        fields.append((field, wire_type, value))
    return fields


def unpack_varints(data):
    values, pos = [], 0
    while pos < len(data):
        value, pos = read_varint(data, pos)
        values.append(value)
    return values


# --- the golden file -----------------------------------------------------------------------------
CONV_W = [0.5, -1.25, 2.0, 3.75, -0.125, 100.0]  # shape 2 x 3
CONV_B = [1.5, -2.5]
LEGACY = [float(i) / 8.0 for i in range(24)]  # num=1 channels=2 height=3 width=4
ROUNDED = [0.1, 1.0 / 3.0]  # double_data rounds to float32
UNPACKED = [7.0, -8.5, 9.25]


def golden_caffemodel():
    conv = (string_field(LAYER_NAME, "conv1") + string_field(LAYER_TYPE, "Convolution")
            + length_delimited(LAYER_BLOBS, blob_with_shape([2, 3], CONV_W))
            + length_delimited(LAYER_BLOBS, blob_with_shape([2], CONV_B)))
    relu = string_field(LAYER_NAME, "relu1") + string_field(LAYER_TYPE, "ReLU")
    legacy_blob = (varint_field(BLOB_NUM, 1) + varint_field(BLOB_CHANNELS, 2)
                   + varint_field(BLOB_HEIGHT, 3) + varint_field(BLOB_WIDTH, 4)
                   + packed_doubles(BLOB_DOUBLE_DATA, LEGACY))
    rounded_blob = (length_delimited(BLOB_SHAPE, packed_varints(SHAPE_DIM, [2]))
                    + packed_doubles(BLOB_DOUBLE_DATA, ROUNDED))
    # A non-packed encoding of the floats (one fixed32 record each) must decode too.
    unpacked_blob = length_delimited(BLOB_SHAPE, packed_varints(SHAPE_DIM, [3])) + b"".join(
        key(BLOB_DATA, FIXED32) + struct.pack("<f", v) for v in UNPACKED)
    legacy = (string_field(LAYER_NAME, "ip_legacy") + string_field(LAYER_TYPE, "InnerProduct")
              + length_delimited(LAYER_BLOBS, legacy_blob)
              + length_delimited(LAYER_BLOBS, rounded_blob)
              + length_delimited(LAYER_BLOBS, unpacked_blob))
    return (string_field(NET_NAME, "golden") + length_delimited(NET_LAYER, conv)
            + length_delimited(NET_LAYER, relu) + length_delimited(NET_LAYER, legacy))


def test_schema_uses_caffes_field_numbers():
    def number(message, name):
        return message.DESCRIPTOR.fields_by_name[name].number

    assert number(caffe_pb2.NetParameter, "name") == NET_NAME
    assert number(caffe_pb2.NetParameter, "layers") == NET_LAYERS_V1
    assert number(caffe_pb2.NetParameter, "layer") == NET_LAYER
    assert [number(caffe_pb2.LayerParameter, n) for n in ("name", "type", "blobs")] == [
        LAYER_NAME, LAYER_TYPE, LAYER_BLOBS]
    assert [number(caffe_pb2.V1LayerParameter, n) for n in ("name", "type", "blobs")] == [
        V1_NAME, V1_TYPE, V1_BLOBS]
    assert caffe_pb2.V1LayerParameter.INNER_PRODUCT == V1_INNER_PRODUCT
    assert number(caffe_pb2.BlobShape, "dim") == SHAPE_DIM
    assert [number(caffe_pb2.BlobProto, n) for n in (
        "num", "channels", "height", "width", "data", "diff", "shape", "double_data")] == [
        BLOB_NUM, BLOB_CHANNELS, BLOB_HEIGHT, BLOB_WIDTH, BLOB_DATA, BLOB_DIFF, BLOB_SHAPE,
        BLOB_DOUBLE_DATA]


def test_read_hand_assembled_caffemodel(tmp_path):
    path = tmp_path / "golden.caffemodel"
    path.write_bytes(golden_caffemodel())
    layers = read_weights(str(path))
    assert [name for name, _ in layers] == ["conv1", "relu1", "ip_legacy"]
    (_, conv), (_, relu), (_, legacy) = layers
    assert relu == []
    assert [a.dtype for a in conv + legacy] == [np.float32] * 5
    np.testing.assert_array_equal(conv[0], np.array(CONV_W, np.float32).reshape(2, 3))
    np.testing.assert_array_equal(conv[1], np.array(CONV_B, np.float32))
    np.testing.assert_array_equal(legacy[0], np.array(LEGACY, np.float32).reshape(1, 2, 3, 4))
    np.testing.assert_array_equal(legacy[1], np.array(ROUNDED).astype(np.float32))
    np.testing.assert_array_equal(legacy[2], np.array(UNPACKED, np.float32))


def test_read_hand_assembled_v1_caffemodel(tmp_path, log_lines):
    v1_layer = (string_field(V1_NAME, "fc") + varint_field(V1_TYPE, V1_INNER_PRODUCT)
                + length_delimited(V1_BLOBS, blob_with_shape([1, 2], [4.0, -4.0])))
    path = tmp_path / "v1.caffemodel"
    path.write_bytes(string_field(NET_NAME, "old") + length_delimited(NET_LAYERS_V1, v1_layer))
    [(name, arrays)] = read_weights(str(path))
    assert name == "fc"
    np.testing.assert_array_equal(arrays[0], np.array([[4.0, -4.0]], np.float32))
    assert (f"Attempting to upgrade input file specified using deprecated V1LayerParameter: "
            f"{path}") in log_lines.messages()


def test_count_mismatch_names_file_and_layer(tmp_path):
    bad = string_field(LAYER_NAME, "conv1") + length_delimited(
        LAYER_BLOBS, blob_with_shape([2, 3], [1.0, 2.0]))
    path = tmp_path / "bad.caffemodel"
    path.write_bytes(length_delimited(NET_LAYER, bad))
    with pytest.raises(CaffeError, match=r"bad\.caffemodel: layer 'conv1' param 0: blob of "
                                         r"shape 2 3 \(6\) holds 2 data values; it needs 6"):
        read_weights(str(path))


def test_our_writer_matches_caffes_wire_format():
    weights = np.array([[0.5, -1.25, 2.0], [3.75, -0.125, 100.0]], np.float32)
    gradient = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    net = caffe_pb2.NetParameter(name="mine")
    layer = net.layer.add(name="conv1", type="Convolution")
    fill_blob_proto(layer.blobs.add(), weights, gradient)
    fill_blob_proto(layer.blobs.add(), np.float32(2.5))  # a 0-axis blob

    top = decode(net.SerializeToString())
    assert [(f, w) for f, w, _ in top] == [(NET_NAME, LENGTH_DELIMITED),
                                           (NET_LAYER, LENGTH_DELIMITED)]
    assert top[0][2] == b"mine"
    layer_fields = decode(top[1][2])
    assert [(f, w) for f, w, _ in layer_fields] == [
        (LAYER_NAME, LENGTH_DELIMITED), (LAYER_TYPE, LENGTH_DELIMITED),
        (LAYER_BLOBS, LENGTH_DELIMITED), (LAYER_BLOBS, LENGTH_DELIMITED)]
    assert layer_fields[0][2] == b"conv1" and layer_fields[1][2] == b"Convolution"

    blob = {f: (w, v) for f, w, v in decode(layer_fields[2][2])}
    assert sorted(blob) == [BLOB_DATA, BLOB_DIFF, BLOB_SHAPE]
    assert all(w == LENGTH_DELIMITED for w, _ in blob.values())  # packed, as Caffe writes
    assert struct.unpack("<6f", blob[BLOB_DATA][1]) == tuple(weights.ravel())
    assert struct.unpack("<6f", blob[BLOB_DIFF][1]) == tuple(gradient.ravel())
    [(dim_field, dim_wire, dims)] = decode(blob[BLOB_SHAPE][1])
    assert (dim_field, dim_wire) == (SHAPE_DIM, LENGTH_DELIMITED)
    assert unpack_varints(dims) == [2, 3]

    scalar = decode(layer_fields[3][2])
    assert [(f, w) for f, w, _ in scalar] == [(BLOB_DATA, LENGTH_DELIMITED)]  # no shape
    assert struct.unpack("<f", scalar[0][2]) == (2.5,)
