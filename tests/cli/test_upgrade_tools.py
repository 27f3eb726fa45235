"""upgrade_net_proto_text, upgrade_net_proto_binary, upgrade_solver_proto_text: Caffe's
tools/upgrade_*.cpp, checked against hand-written Caffe output and the engine's own loader."""
import os
import re

import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_cli.io.blob_proto import blob_proto_shape, blob_proto_to_array
from pycaffe_cli.io.prototxt import read_net_param, read_net_param_binary, read_solver_param
from pycaffe_cli.io.upgrade import net_needs_upgrade, upgrade_net
from pycaffe_cli.io.weights import read_weights
from pycaffe_cli.net.net import Net
from pycaffe_cli.net.weights import copy_trained_layers_from
from pycaffe_cli.proto import caffe_pb2

V1 = caffe_pb2.V1LayerParameter

# A V1 net (``layers`` with enum types, blobs_lr, net-level input fields, transformation
# fields inside data_param).
V1_NET = '''\
name: "TinyV1"
input: "data"
input_dim: 1
input_dim: 3
input_dim: 4
input_dim: 4
layers {
  name: "conv1"
  type: CONVOLUTION
  bottom: "data"
  top: "conv1"
  blobs_lr: 1
  blobs_lr: 2
  weight_decay: 1
  weight_decay: 0
  convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "xavier" } }
}
layers { name: "relu1" type: RELU bottom: "conv1" top: "conv1" }
layers {
  name: "ip1"
  type: INNER_PRODUCT
  bottom: "conv1"
  top: "ip1"
  inner_product_param { num_output: 2 }
}
'''

# What Caffe's upgrade_net_proto_text writes for V1_NET (C++ TextFormat spells 1.0f as "1").
V1_NET_BY_CAFFE = '''\
name: "TinyV1"
layer {
  name: "input"
  type: "Input"
  top: "data"
  input_param {
    shape {
      dim: 1
      dim: 3
      dim: 4
      dim: 4
    }
  }
}
layer {
  name: "conv1"
  type: "Convolution"
  bottom: "data"
  top: "conv1"
  param {
    lr_mult: 1
    decay_mult: 1
  }
  param {
    lr_mult: 2
    decay_mult: 0
  }
  convolution_param {
    num_output: 4
    kernel_size: 3
    weight_filler {
      type: "xavier"
    }
  }
}
layer {
  name: "relu1"
  type: "ReLU"
  bottom: "conv1"
  top: "conv1"
}
layer {
  name: "ip1"
  type: "InnerProduct"
  bottom: "conv1"
  top: "ip1"
  inner_product_param {
    num_output: 2
  }
}
'''

# A V0 net: padding layer folded into the conv, flat fields moved into typed params.
V0_NET = '''\
name: "TinyV0"
input: "data"
input_dim: 1 input_dim: 3 input_dim: 8 input_dim: 8
layers { layer { name: "pad1" type: "padding" pad: 1 } bottom: "data" top: "pad1" }
layers {
  layer {
    name: "conv1" type: "conv" num_output: 4 kernelsize: 3 stride: 2
    blobs_lr: 1 blobs_lr: 2 weight_filler { type: "gaussian" std: 0.01 }
  }
  bottom: "pad1" top: "conv1"
}
layers { layer { name: "pool1" type: "pool" pool: MAX kernelsize: 2 stride: 2 }
         bottom: "conv1" top: "pool1" }
layers { layer { name: "fc" type: "innerproduct" num_output: 2 } bottom: "pool1" top: "fc" }
'''

V0_NET_EXPECTED = '''
name: "TinyV0"
layer { name: "input" type: "Input" top: "data"
        input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } } }
layer {
  name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  param { lr_mult: 1 } param { lr_mult: 2 }
  convolution_param { num_output: 4 pad: 1 kernel_size: 3 stride: 2
                      weight_filler { type: "gaussian" std: 0.01 } }
}
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "fc" type: "InnerProduct" bottom: "pool1" top: "fc"
        inner_product_param { num_output: 2 } }
'''

CURRENT_NET = '''\
name: "Current"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 } } }
layer { name: "relu" type: "ReLU" bottom: "data" top: "data" }
'''


def caffe_float_spelling(text):
    """``lr_mult: 1.0`` -> ``lr_mult: 1``: C++ TextFormat prints integral floats without
    ".0"; pycaffe's writer (Python's text_format) keeps it. Both parse to the same value."""
    return re.sub(r"(: -?\d+)\.0\n", r"\1\n", text)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def message_line(result, text):
    """The stderr line (with its glog prefix) whose message contains ``text``."""
    return next(line for line in result.err.splitlines() if text in line)


def left_files(folder):
    return sorted(os.listdir(folder))


# --- upgrade_net_proto_text -------------------------------------------------------------------
def test_v1_text_net_becomes_what_caffe_writes(run_cli, tmp_path):
    source = write(tmp_path, "v1.prototxt", V1_NET)
    out = tmp_path / "new.prototxt"
    result = run_cli("upgrade_net_proto_text", source, out)
    assert result.code == 0, result.err
    written = out.read_text()
    assert caffe_float_spelling(written) == V1_NET_BY_CAFFE
    by_caffe = text_format.Parse(V1_NET_BY_CAFFE, caffe_pb2.NetParameter())
    assert read_net_param(str(out)) == by_caffe
    assert read_net_param(str(out)) == upgrade_net(read_net_param(source))
    assert (f"Attempting to upgrade input file specified using deprecated V1LayerParameter: "
            f"{source}") in result.messages
    assert (f"Attempting to upgrade input file specified using deprecated input fields: "
            f"{source}") in result.messages
    assert message_line(result, "Wrote upgraded NetParameter text proto to").startswith("I")
    assert f"Wrote upgraded NetParameter text proto to {out}" in result.messages


def test_v0_text_net_field_by_field(run_cli, tmp_path):
    source = write(tmp_path, "v0.prototxt", V0_NET)
    out = tmp_path / "new.prototxt"
    result = run_cli("upgrade_net_proto_text", source, out)
    assert result.code == 0, result.err
    upgraded = read_net_param(str(out))
    assert upgraded == text_format.Parse(V0_NET_EXPECTED, caffe_pb2.NetParameter())
    assert upgraded == upgrade_net(read_net_param(source))
    assert not net_needs_upgrade(upgraded)
    assert ("Successfully upgraded file specified using deprecated V0LayerParameter"
            in result.messages)


def test_v1_data_transformation_and_batch_norm_fields(run_cli, tmp_path):
    source = write(tmp_path, "old.prototxt", '''
        layers { name: "data" type: DATA top: "data" top: "label"
                 data_param { source: "db" batch_size: 8 scale: 0.5 mirror: true } }
    ''')
    out = tmp_path / "new.prototxt"
    assert run_cli("upgrade_net_proto_text", source, out).code == 0
    data = read_net_param(str(out)).layer[0]
    assert data.type == "Data"
    assert data.transform_param == caffe_pb2.TransformationParameter(scale=0.5, mirror=True)
    assert data.data_param == caffe_pb2.DataParameter(source="db", batch_size=8)

    source = write(tmp_path, "bn.prototxt", '''
        layer { name: "bn" type: "BatchNorm" bottom: "x" top: "x"
                param { lr_mult: 1 } param { lr_mult: 1 } param { lr_mult: 1 } }
    ''')
    result = run_cli("upgrade_net_proto_text", source, out)
    assert result.code == 0
    assert [(p.lr_mult, p.decay_mult) for p in read_net_param(str(out)).layer[0].param] == [
        (0, 0)] * 3
    assert ("Successfully upgraded batch norm layers using deprecated params."
            in result.messages)


def test_current_net_is_copied_with_caffes_error_level_note(run_cli, tmp_path):
    source = write(tmp_path, "net.prototxt", CURRENT_NET)
    out = tmp_path / "same.prototxt"
    result = run_cli("upgrade_net_proto_text", source, out)
    assert result.code == 0, result.err
    assert message_line(result, "File already in latest proto format").startswith("E")
    assert f"File already in latest proto format: {source}" in result.messages
    assert read_net_param(str(out)) == read_net_param(source)


def test_upgrade_problems_exit_1_and_still_write(run_cli, tmp_path):
    # V0 innerproduct has no "group": Caffe logs it, drops it, continues and returns 1
    source = write(tmp_path, "v0.prototxt", '''
        input: "data" input_dim: 1 input_dim: 3 input_dim: 1 input_dim: 1
        layers { layer { name: "fc" type: "innerproduct" num_output: 2 group: 3 }
                 bottom: "data" top: "fc" }
    ''')
    out = tmp_path / "new.prototxt"
    result = run_cli("upgrade_net_proto_text", source, out)
    assert result.code == 1
    assert result.error_lines() == []
    assert message_line(result, "Unknown parameter group for layer type innerproduct"
                        ).startswith("E")
    assert ("Encountered error(s) while upgrading prototxt; see details above."
            in result.messages)
    fc = read_net_param(str(out)).layer[1]
    assert (fc.type, fc.inner_product_param.num_output) == ("InnerProduct", 2)


def test_unparsable_input_exits_2_with_one_line(run_cli, tmp_path):
    source = write(tmp_path, "bad.prototxt", 'name: "x"\nlayer { nmae: "a" }\n')
    out = tmp_path / "new.prototxt"
    result = run_cli("upgrade_net_proto_text", source, out)
    assert result.code == 2
    assert result.error_lines() == [
        f"pycaffe: error: Failed to parse input text file as NetParameter: {source}:2:9: "
        'Message type "caffe.LayerParameter" has no field named "nmae".']
    assert left_files(tmp_path) == ["bad.prototxt"]


@pytest.mark.parametrize("tool", ["upgrade_net_proto_text", "upgrade_net_proto_binary",
                                  "upgrade_solver_proto_text"])
def test_missing_input_exits_1_and_writes_nothing(run_cli, tmp_path, tool):
    result = run_cli(tool, tmp_path / "absent", tmp_path / "out")
    assert result.code == 1
    assert len(result.error_lines()) == 1
    assert "absent" in result.error_lines()[0]
    assert "No such file or directory" in result.error_lines()[0]
    assert left_files(tmp_path) == []


@pytest.mark.parametrize("target", ["missing_folder/out.prototxt", "a_folder"])
def test_unwritable_output_exits_1_and_leaves_nothing(run_cli, tmp_path, target):
    source = write(tmp_path, "v1.prototxt", V1_NET)
    (tmp_path / "a_folder").mkdir()
    result = run_cli("upgrade_net_proto_text", source, tmp_path / target)
    assert result.code == 1
    assert len(result.error_lines()) == 1
    assert f"cannot write '{tmp_path / target}'" in result.error_lines()[0]
    assert left_files(tmp_path) == ["a_folder", "v1.prototxt"]
    assert left_files(tmp_path / "a_folder") == []


def test_upgrade_in_place(run_cli, tmp_path):
    source = write(tmp_path, "net.prototxt", V1_NET)
    assert run_cli("upgrade_net_proto_text", source, source).code == 0
    assert read_net_param(source) == text_format.Parse(V1_NET_BY_CAFFE,
                                                       caffe_pb2.NetParameter())
    assert left_files(tmp_path) == ["net.prototxt"]


# --- upgrade_net_proto_binary -----------------------------------------------------------------
def legacy_blob(values, num, channels, height, width):
    blob = caffe_pb2.BlobProto(num=num, channels=channels, height=height, width=width)
    blob.data.extend(np.asarray(values, np.float32).ravel())
    return blob


@pytest.fixture
def v1_model(tmp_path):
    """A V1 .caffemodel of V1_NET's layers with blobs in the legacy 4-d fields, as old
    Caffe wrote them (inner product weights as 1 x 1 x N x K); returns (path, arrays)."""
    rng = np.random.default_rng(3)
    arrays = {"conv1": [rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4)],
              "ip1": [rng.standard_normal((2, 16)), rng.standard_normal(2)]}
    param = caffe_pb2.NetParameter(name="TinyV1")
    conv = param.layers.add(name="conv1", type=V1.CONVOLUTION, bottom=["data"], top=["conv1"])
    conv.convolution_param.num_output, conv.convolution_param.kernel_size[:] = 4, [3]
    conv.blobs.extend([legacy_blob(arrays["conv1"][0], 4, 3, 3, 3),
                       legacy_blob(arrays["conv1"][1], 1, 1, 1, 4)])
    param.layers.add(name="relu1", type=V1.RELU, bottom=["conv1"], top=["conv1"])
    ip = param.layers.add(name="ip1", type=V1.INNER_PRODUCT, bottom=["conv1"], top=["ip1"])
    ip.inner_product_param.num_output = 2
    ip.blobs.extend([legacy_blob(arrays["ip1"][0], 1, 1, 2, 16),
                     legacy_blob(arrays["ip1"][1], 1, 1, 1, 2)])
    path = tmp_path / "old.caffemodel"
    path.write_bytes(param.SerializeToString())
    return str(path), arrays


def test_v1_binary_model_keeps_names_blobs_and_shapes(run_cli, tmp_path, v1_model):
    source, arrays = v1_model
    out = tmp_path / "new.caffemodel"
    result = run_cli("upgrade_net_proto_binary", source, out)
    assert result.code == 0, result.err
    assert f"Wrote upgraded NetParameter binary proto to {out}" in result.messages
    upgraded = read_net_param_binary(str(out))
    assert not upgraded.layers and not net_needs_upgrade(upgraded)
    assert upgraded == upgrade_net(read_net_param_binary(source))
    assert [(layer.name, layer.type, len(layer.blobs)) for layer in upgraded.layer] == [
        ("conv1", "Convolution", 2), ("relu1", "ReLU", 0), ("ip1", "InnerProduct", 2)]
    shapes = [blob_proto_shape(blob) for layer in upgraded.layer for blob in layer.blobs]
    assert shapes == [(4, 3, 3, 3), (1, 1, 1, 4), (1, 1, 2, 16), (1, 1, 1, 2)]
    for layer in upgraded.layer:
        for blob, expected in zip(layer.blobs, arrays.get(layer.name, [])):
            np.testing.assert_array_equal(blob_proto_to_array(blob).ravel(),
                                          expected.astype(np.float32).ravel())


def test_upgraded_binary_model_loads_into_the_upgraded_net(run_cli, tmp_path, v1_model):
    source, arrays = v1_model
    prototxt = write(tmp_path, "v1.prototxt", V1_NET)
    assert run_cli("upgrade_net_proto_text", prototxt, tmp_path / "new.prototxt").code == 0
    assert run_cli("upgrade_net_proto_binary", source, tmp_path / "new.caffemodel").code == 0
    net = Net.from_file(str(tmp_path / "new.prototxt"), caffe_pb2.TEST)
    copy_trained_layers_from(net, str(tmp_path / "new.caffemodel"))
    for name, expected in arrays.items():
        blobs = net.layer_by_name(name).blobs
        for blob, values in zip(blobs, expected):
            np.testing.assert_array_equal(blob.data, values.astype(np.float32))
    # the engine's loader, which upgrades on the fly, reads the old file the same way
    old = dict(read_weights(source))
    for name, new_arrays in read_weights(str(tmp_path / "new.caffemodel")):
        for new, before in zip(new_arrays, old[name]):
            np.testing.assert_array_equal(new, before)


def test_v0_binary_model_keeps_its_blobs(run_cli, tmp_path):
    weights, bias = np.arange(6, dtype=np.float32) - 2.5, np.array([0.5, -1], np.float32)
    param = caffe_pb2.NetParameter(name="OldV0", input=["data"], input_dim=[1, 3, 1, 1])
    entry = param.layers.add(bottom=["data"], top=["fc"])
    entry.layer.name, entry.layer.type, entry.layer.num_output = "fc", "innerproduct", 2
    entry.layer.blobs.extend([legacy_blob(weights, 1, 1, 2, 3), legacy_blob(bias, 1, 1, 1, 2)])
    source = tmp_path / "v0.caffemodel"
    source.write_bytes(param.SerializeToString())
    out = tmp_path / "new.caffemodel"
    assert run_cli("upgrade_net_proto_binary", source, out).code == 0
    upgraded = read_net_param_binary(str(out))
    assert [layer.type for layer in upgraded.layer] == ["Input", "InnerProduct"]
    fc = upgraded.layer[1]
    assert [blob_proto_shape(blob) for blob in fc.blobs] == [(1, 1, 2, 3), (1, 1, 1, 2)]
    np.testing.assert_array_equal(blob_proto_to_array(fc.blobs[0]).ravel(), weights)
    np.testing.assert_array_equal(blob_proto_to_array(fc.blobs[1]).ravel(), bias)


def test_current_binary_model_is_rewritten_unchanged(run_cli, tmp_path):
    param = caffe_pb2.NetParameter(name="Current")
    layer = param.layer.add(name="ip", type="InnerProduct")
    layer.blobs.add().data.extend([1.5, -2.0])
    source = tmp_path / "current.caffemodel"
    source.write_bytes(param.SerializeToString())
    out = tmp_path / "out.caffemodel"
    result = run_cli("upgrade_net_proto_binary", source, out)
    assert result.code == 0, result.err
    assert message_line(result, "File already in latest proto format").startswith("E")
    assert out.read_bytes() == source.read_bytes()


@pytest.mark.parametrize("content", [V1_NET.encode(), b""])
def test_binary_tool_refuses_what_is_no_binary_net(run_cli, tmp_path, content):
    source = tmp_path / "in.caffemodel"
    source.write_bytes(content)
    result = run_cli("upgrade_net_proto_binary", source, tmp_path / "out.caffemodel")
    assert result.code == 2
    [line] = result.error_lines()
    assert line.startswith(
        f"pycaffe: error: Failed to parse input binary file as NetParameter: '{source}'")
    assert left_files(tmp_path) == ["in.caffemodel"]


# --- upgrade_solver_proto_text ----------------------------------------------------------------
def test_solver_type_enum_becomes_type_string(run_cli, tmp_path):
    source = write(tmp_path, "solver.prototxt",
                   'net: "net.prototxt"\nbase_lr: 0.01\nsolver_type: NESTEROV\n')
    out = tmp_path / "new.prototxt"
    result = run_cli("upgrade_solver_proto_text", source, out)
    assert result.code == 0, result.err
    assert out.read_text() == 'base_lr: 0.01\nnet: "net.prototxt"\ntype: "Nesterov"\n'
    assert f"Wrote upgraded SolverParameter text proto to {out}" in result.messages


def test_current_solver_and_a_net_given_as_solver(run_cli, tmp_path):
    source = write(tmp_path, "solver.prototxt", 'net: "n.prototxt"\ntype: "Adam"\n')
    out = tmp_path / "new.prototxt"
    result = run_cli("upgrade_solver_proto_text", source, out)
    assert result.code == 0
    assert message_line(result, "File already in latest proto format").startswith("E")
    assert read_solver_param(str(out)) == read_solver_param(source)

    net = write(tmp_path, "net.prototxt", CURRENT_NET)
    result = run_cli("upgrade_solver_proto_text", net, out)
    assert result.code == 2
    assert result.error_lines()[0].startswith(
        f"pycaffe: error: Failed to parse input text file as SolverParameter: {net}:1:1:")


def test_tools_are_listed_in_help(run_cli):
    result = run_cli("--help")
    listed = [line.split()[0] for line in result.out.splitlines() if line.startswith("  ")]
    for tool in ("upgrade_net_proto_text", "upgrade_net_proto_binary",
                 "upgrade_solver_proto_text"):
        assert tool in listed
