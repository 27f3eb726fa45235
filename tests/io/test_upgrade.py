"""upgrade_net / upgrade_solver against hand-written expected current-format nets."""
import pytest
from google.protobuf import text_format

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.upgrade import (V1_LAYER_TYPES, net_needs_upgrade, upgrade_net,
                                    upgrade_solver, upgrade_v1_layer_type)
from pycaffe_cli.proto import caffe_pb2
from tests.io.helpers import assert_upgrades_to, net


V1_LENET = '''
name: "LeNet"
layers {
  name: "mnist"
  type: DATA
  top: "data"
  top: "label"
  data_param {
    source: "examples/mnist/mnist_train_lmdb"
    backend: LMDB
    batch_size: 64
    scale: 0.00390625
    mirror: true
  }
  include: { phase: TRAIN }
}
layers {
  name: "mnist"
  type: DATA
  top: "data"
  top: "label"
  data_param { source: "examples/mnist/mnist_test_lmdb" backend: LMDB batch_size: 100 }
  transform_param { scale: 0.00390625 }
  include: { phase: TEST }
}
layers {
  name: "conv1"
  type: CONVOLUTION
  bottom: "data"
  top: "conv1"
  blobs_lr: 1
  blobs_lr: 2
  weight_decay: 1
  weight_decay: 0
  convolution_param {
    num_output: 20
    kernel_size: 5
    weight_filler { type: "xavier" }
    bias_filler { type: "constant" }
  }
}
layers {
  name: "pool1"
  type: POOLING
  bottom: "conv1"
  top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 }
}
layers {
  name: "ip1"
  type: INNER_PRODUCT
  bottom: "pool1"
  top: "ip1"
  param: "ip1_w"
  param: "ip1_b"
  blob_share_mode: PERMISSIVE
  blobs_lr: 1
  inner_product_param { num_output: 500 weight_filler { type: "xavier" } }
}
layers { name: "relu1" type: RELU bottom: "ip1" top: "ip1" relu_param { negative_slope: 0.1 } }
layers {
  name: "accuracy"
  type: ACCURACY
  bottom: "ip1"
  bottom: "label"
  top: "accuracy"
  exclude: { phase: TRAIN }
}
layers {
  name: "loss"
  type: SOFTMAX_LOSS
  bottom: "ip1"
  bottom: "label"
  top: "loss"
  loss_weight: 2
  loss_param { ignore_label: 3 }
}
'''

CURRENT_LENET = '''
name: "LeNet"
layer {
  name: "mnist"
  type: "Data"
  top: "data"
  top: "label"
  include { phase: TRAIN }
  transform_param { scale: 0.00390625 mirror: true }
  data_param { source: "examples/mnist/mnist_train_lmdb" batch_size: 64 backend: LMDB }
}
layer {
  name: "mnist"
  type: "Data"
  top: "data"
  top: "label"
  include { phase: TEST }
  transform_param { scale: 0.00390625 }
  data_param { source: "examples/mnist/mnist_test_lmdb" batch_size: 100 backend: LMDB }
}
layer {
  name: "conv1"
  type: "Convolution"
  bottom: "data"
  top: "conv1"
  param { lr_mult: 1 decay_mult: 1 }
  param { lr_mult: 2 decay_mult: 0 }
  convolution_param {
    num_output: 20
    kernel_size: 5
    weight_filler { type: "xavier" }
    bias_filler { type: "constant" }
  }
}
layer {
  name: "pool1"
  type: "Pooling"
  bottom: "conv1"
  top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 }
}
layer {
  name: "ip1"
  type: "InnerProduct"
  bottom: "pool1"
  top: "ip1"
  param { name: "ip1_w" share_mode: PERMISSIVE lr_mult: 1 }
  param { name: "ip1_b" }
  inner_product_param { num_output: 500 weight_filler { type: "xavier" } }
}
layer {
  name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" relu_param { negative_slope: 0.1 }
}
layer {
  name: "accuracy"
  type: "Accuracy"
  bottom: "ip1"
  bottom: "label"
  top: "accuracy"
  exclude { phase: TRAIN }
}
layer {
  name: "loss"
  type: "SoftmaxWithLoss"
  bottom: "ip1"
  bottom: "label"
  top: "loss"
  loss_weight: 2
  loss_param { ignore_label: 3 }
}
'''


def test_v1_lenet(log_lines):
    assert_upgrades_to(V1_LENET, CURRENT_LENET, source="lenet_v1.prototxt")
    info = log_lines.messages()
    assert ("Attempting to upgrade input file specified using deprecated transformation "
            "parameters: lenet_v1.prototxt") in info
    assert ("Attempting to upgrade input file specified using deprecated V1LayerParameter: "
            "lenet_v1.prototxt") in info
    assert "Successfully upgraded file specified using deprecated V1LayerParameter" in info


def test_v1_image_data_transform_fields_and_blobs():
    old = '''layers { name: "img" type: IMAGE_DATA top: "d"
              image_data_param { source: "list.txt" mean_file: "m.binaryproto" crop_size: 7
                                 batch_size: 2 }
              blobs { num: 1 channels: 1 height: 1 width: 2 data: 1 data: 2 } }'''
    expected = '''layer { name: "img" type: "ImageData" top: "d"
              blobs { num: 1 channels: 1 height: 1 width: 2 data: 1 data: 2 }
              transform_param { crop_size: 7 mean_file: "m.binaryproto" }
              image_data_param { source: "list.txt" batch_size: 2 } }'''
    assert_upgrades_to(old, expected)


def test_every_v1_type_has_a_current_name():
    values = caffe_pb2.V1LayerParameter.LayerType.values()
    assert set(V1_LAYER_TYPES) == set(values) - {caffe_pb2.V1LayerParameter.NONE}
    assert len(values) == 40
    assert upgrade_v1_layer_type(caffe_pb2.V1LayerParameter.SOFTMAX_LOSS) == "SoftmaxWithLoss"
    assert upgrade_v1_layer_type(caffe_pb2.V1LayerParameter.IM2COL) == "Im2col"
    assert upgrade_v1_layer_type(caffe_pb2.V1LayerParameter.NONE) == ""


def test_v1_type_none_is_an_error():
    with pytest.raises(CaffeError, match='layer "odd": V1 layer type NONE'):
        upgrade_net(net('layers { name: "odd" type: NONE }'))


def test_mixed_layer_and_layers_is_an_error():
    with pytest.raises(CaffeError, match="both current 'layer' and deprecated V1 'layers'"):
        upgrade_net(net('layer { name: "a" type: "ReLU" } layers { name: "b" type: RELU }'))


def test_input_dim_becomes_input_layer(log_lines):
    old = '''name: "deploy" input: "data" input_dim: 10 input_dim: 3 input_dim: 227
             input_dim: 227 layer { name: "relu" type: "ReLU" bottom: "data" top: "r" }'''
    expected = '''name: "deploy"
      layer { name: "input" type: "Input" top: "data"
              input_param { shape { dim: 10 dim: 3 dim: 227 dim: 227 } } }
      layer { name: "relu" type: "ReLU" bottom: "data" top: "r" }'''
    assert_upgrades_to(old, expected, source="deploy.prototxt")
    assert ("Note that future Caffe releases will only support input layers and not input "
            "fields.") in log_lines.messages(level=30)


def test_input_shape_becomes_input_layer():
    old = '''input: "a" input_shape { dim: 2 dim: 5 } input: "b" input_shape { dim: 2 }
             layer { name: "ip" type: "InnerProduct" bottom: "a" top: "ip" }
             layer { name: "s" type: "Silence" bottom: "b" }'''
    expected = '''
      layer { name: "input" type: "Input" top: "a" top: "b"
              input_param { shape { dim: 2 dim: 5 } shape { dim: 2 } } }
      layer { name: "ip" type: "InnerProduct" bottom: "a" top: "ip" }
      layer { name: "s" type: "Silence" bottom: "b" }'''
    assert_upgrades_to(old, expected)


def test_input_without_shape_is_dropped():
    assert_upgrades_to('input: "data" layer { name: "a" type: "ReLU" bottom: "data" }',
                       'layer { name: "a" type: "ReLU" bottom: "data" }')


@pytest.mark.parametrize("text", ['input: "a" input_dim: 1 input_dim: 2',
                                  'input: "a" input: "b" input_shape { dim: 1 }'])
def test_bad_input_dims(text):
    with pytest.raises(CaffeError, match="input"):
        upgrade_net(net(text))


def test_batch_norm_params(log_lines):
    old = '''
      layer { name: "bn0" type: "BatchNorm" param { lr_mult: 0 } param { lr_mult: 0 }
              param { lr_mult: 0 } }
      layer { name: "bn1" type: "BatchNorm" param { name: "m" lr_mult: 1 decay_mult: 1 }
              param { name: "v" } param { name: "b" lr_mult: 2 } }
      layer { name: "bn2" type: "BatchNorm" }
      layer { name: "conv" type: "Convolution" param { lr_mult: 1 } param { lr_mult: 1 }
              param { lr_mult: 1 } }'''
    expected = '''
      layer { name: "bn0" type: "BatchNorm" param { lr_mult: 0 decay_mult: 0 }
              param { lr_mult: 0 decay_mult: 0 } param { lr_mult: 0 decay_mult: 0 } }
      layer { name: "bn1" type: "BatchNorm" param { name: "m" lr_mult: 0 decay_mult: 0 }
              param { name: "v" lr_mult: 0 decay_mult: 0 }
              param { name: "b" lr_mult: 0 decay_mult: 0 } }
      layer { name: "bn2" type: "BatchNorm" }
      layer { name: "conv" type: "Convolution" param { lr_mult: 1 } param { lr_mult: 1 }
              param { lr_mult: 1 } }'''
    upgraded = upgrade_net(net(old), source="bn.prototxt")
    assert text_format.MessageToString(upgraded) == text_format.MessageToString(net(expected))
    assert ("Attempting to upgrade batch norm layers using deprecated params: bn.prototxt"
            in log_lines.messages())


def test_current_net_is_returned_as_is():
    current = net(CURRENT_LENET)
    assert not net_needs_upgrade(current)
    assert upgrade_net(current) is current


@pytest.mark.parametrize("enum_name, type_name", [
    ("SGD", "SGD"), ("NESTEROV", "Nesterov"), ("ADAGRAD", "AdaGrad"), ("RMSPROP", "RMSProp"),
    ("ADADELTA", "AdaDelta"), ("ADAM", "Adam")])
def test_solver_type(enum_name, type_name, log_lines):
    solver = text_format.Parse(f"base_lr: 0.1 solver_type: {enum_name}",
                               caffe_pb2.SolverParameter())
    upgraded = upgrade_solver(solver, source="solver.prototxt")
    assert upgraded.type == type_name
    assert not upgraded.HasField("solver_type")
    assert upgraded.base_lr == pytest.approx(0.1)
    assert solver.HasField("solver_type")  # input untouched
    assert any("deprecated 'solver_type' field (enum)': solver.prototxt" in m
               for m in log_lines.messages())


def test_solver_without_solver_type_is_unchanged():
    solver = caffe_pb2.SolverParameter(type="Adam")
    assert upgrade_solver(solver) is solver


def test_solver_type_conflict():
    solver = text_format.Parse('solver_type: ADAM type: "SGD"', caffe_pb2.SolverParameter())
    with pytest.raises(CaffeError, match='s.prototxt: solver_type ADAM and type "SGD" disagree'):
        upgrade_solver(solver, source="s.prototxt")
    agreeing = text_format.Parse('solver_type: ADAM type: "Adam"', caffe_pb2.SolverParameter())
    assert upgrade_solver(agreeing).type == "Adam"
