"""Reading/writing prototxts and binary protos, with file:line:col error messages."""
import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.blob_proto import blob_proto_to_array, fill_blob_proto
from pycaffe_cli.io.prototxt import (locate_layer, read_blob_proto, read_net_param,
                                     read_net_param_binary, read_solver_param,
                                     write_binary_proto, write_blob_proto, write_text_proto)
from pycaffe_cli.proto import caffe_pb2

LENET_HEAD = '''name: "LeNet"
layer {
  name: "data"
  type: "Input"
  top: "data"
  input_param { shape { dim: 64 dim: 1 dim: 28 dim: 28 } }
}
layer {
  name: "conv1"
  type: "Convolution"
  bottom: "data"
  top: "conv1"
  convolution_param {
    num_output: 20
'''


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_read_net_param(tmp_path):
    path = write(tmp_path, "lenet.prototxt", LENET_HEAD + "    kernel_size: 5\n  }\n}\n")
    net = read_net_param(path)
    assert net.name == "LeNet"
    assert [layer.name for layer in net.layer] == ["data", "conv1"]
    assert list(net.layer[1].convolution_param.kernel_size) == [5]


def test_unknown_field_reports_file_line_column(tmp_path):
    path = write(tmp_path, "lenet.prototxt", LENET_HEAD + "    kernle_size: 5\n  }\n}\n")
    with pytest.raises(CaffeError) as info:
        read_net_param(path)
    assert str(info.value).startswith(
        f'{path}:15:5: Message type "caffe.ConvolutionParameter" has no field named '
        '"kernle_size"')


def test_unknown_layer_field(tmp_path):
    path = write(tmp_path, "n.prototxt", 'layer {\n  name: "a"\n  kernle_size: 3\n}\n')
    with pytest.raises(CaffeError, match=r'n\.prototxt:3:3: Message type "caffe\.LayerParameter"'
                                         r' has no field named "kernle_size"'):
        read_net_param(path)


def test_syntax_error_reports_file_line_column(tmp_path):
    path = write(tmp_path, "n.prototxt", 'name: "x"\nlayer {\n  name: "a"\n')
    with pytest.raises(CaffeError, match=r'n\.prototxt:3:\d+: Expected "}"'):
        read_net_param(path)
    path = write(tmp_path, "m.prototxt", 'layer {\n  name "a"\n}\n')
    with pytest.raises(CaffeError, match=r"m\.prototxt:2:8: "):
        read_net_param(path)


def test_bad_enum_value(tmp_path):
    path = write(tmp_path, "s.prototxt", 'base_lr: 0.01\nsolver_mode: TPU\n')
    with pytest.raises(CaffeError, match=r's\.prototxt:2:14: .*has no value named TPU'):
        read_solver_param(path)


def test_missing_files(tmp_path):
    missing = str(tmp_path / "x.prototxt")
    with pytest.raises(CaffeError) as info:
        read_net_param(missing)
    assert str(info.value) == f"cannot read net file '{missing}': No such file or directory"
    with pytest.raises(CaffeError, match="cannot read solver file"):
        read_solver_param(missing)
    with pytest.raises(CaffeError, match="cannot read weights file"):
        read_net_param_binary(missing)


def test_non_utf8_text(tmp_path):
    path = tmp_path / "bin.prototxt"
    path.write_bytes(b'name: "a"\nlayer { name: "\xff" }\n')
    with pytest.raises(CaffeError, match=r"bin\.prototxt:2:16: the file is not UTF-8 text"):
        read_net_param(str(path))


def test_solver_param(tmp_path):
    path = write(tmp_path, "solver.prototxt",
                 'net: "lenet.prototxt"\nbase_lr: 0.01\nlr_policy: "inv"\nmax_iter: 100\n')
    solver = read_solver_param(path)
    assert solver.net == "lenet.prototxt" and solver.max_iter == 100
    assert solver.base_lr == pytest.approx(0.01)


def test_text_round_trip(tmp_path):
    net = caffe_pb2.NetParameter(name="n")
    net.layer.add(name="a", type="ReLU", bottom=["x"], top=["x"])
    path = str(tmp_path / "out.prototxt")
    write_text_proto(path, net)
    assert read_net_param(path) == net


def test_binary_net_round_trip_and_errors(tmp_path):
    net = caffe_pb2.NetParameter(name="n")
    layer = net.layer.add(name="ip", type="InnerProduct")
    fill_blob_proto(layer.blobs.add(), np.ones((2, 3), np.float32))
    path = str(tmp_path / "w.caffemodel")
    write_binary_proto(path, net)
    assert read_net_param_binary(path) == net

    payload = (tmp_path / "w.caffemodel").read_bytes()
    truncated = tmp_path / "truncated.caffemodel"
    truncated.write_bytes(payload[:-5])
    empty = tmp_path / "empty.caffemodel"
    empty.write_bytes(b"")
    no_layers = tmp_path / "nolayers.caffemodel"
    no_layers.write_bytes(b"\x0a\x03abc")  # a NetParameter with only name = "abc"
    text = tmp_path / "text.caffemodel"
    text.write_text('name: "LeNet"\nlayer { name: "a" }\n')
    for bad, reason in ((truncated, "does not decode"), (empty, "the file is empty"),
                        (no_layers, "it holds no layers"), (text, "")):
        with pytest.raises(CaffeError) as info:
            read_net_param_binary(str(bad))
        message = str(info.value)
        assert message.startswith(f"'{bad}' is not a valid Caffe binary proto (NetParameter)")
        assert reason in message


def test_blob_proto_round_trip(tmp_path):
    mean = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32)
    blob = fill_blob_proto(caffe_pb2.BlobProto(), mean[None])
    path = str(tmp_path / "mean.binaryproto")
    write_blob_proto(path, blob)
    back = read_blob_proto(path)
    assert list(back.shape.dim) == [1, 3, 4, 5]
    np.testing.assert_array_equal(blob_proto_to_array(back), mean[None])


def test_blob_proto_errors(tmp_path):
    empty = tmp_path / "mean.binaryproto"
    empty.write_bytes(b"")
    with pytest.raises(CaffeError, match=r"is not a valid Caffe binary proto \(BlobProto\): "
                                         "the file is empty"):
        read_blob_proto(str(empty))
    shape_only = tmp_path / "shape.binaryproto"
    shape_only.write_bytes(caffe_pb2.BlobProto(num=1).SerializeToString())
    with pytest.raises(CaffeError, match="holds no data"):
        read_blob_proto(str(shape_only))
    with pytest.raises(CaffeError, match="cannot read mean file"):
        read_blob_proto(str(tmp_path / "nope"), what="mean file")


V1_AND_CURRENT = '''name: "n"
layer {
  name: "data"
  type: "Data"
  param { name: "data" }
}
layer {
  # name: "conv1" in a comment does not count
  name: 'conv1'
  type: "Convolution"
  param { name: "conv1" }
}
layers {
  layer {
    name: "v0conv"
  }
}
'''


def test_locate_layer(tmp_path):
    path = write(tmp_path, "n.prototxt", V1_AND_CURRENT)
    assert locate_layer(path, "data") == f"{path}:3"
    assert locate_layer(path, "conv1") == f"{path}:9"
    assert locate_layer(path, "v0conv") == f"{path}:15"
    assert locate_layer(path, "n") == path
    assert locate_layer(path, "missing") == path
    assert locate_layer(str(tmp_path / "gone.prototxt"), "x") == str(tmp_path / "gone.prototxt")


def test_locate_layer_escaped_name(tmp_path):
    path = write(tmp_path, "n.prototxt", 'layer {\n  name: "a\\"b"\n}\n')
    assert text_format.Parse(open(path).read(), caffe_pb2.NetParameter()).layer[0].name == 'a"b'
    assert locate_layer(path, 'a"b') == f"{path}:2"
