"""V0 nets (``layers { layer { ... } }``, padding layers) upgraded to the current format."""
import pytest
from google.protobuf import text_format

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.upgrade import upgrade_net
from pycaffe_cli.proto import caffe_pb2
from tests.io.helpers import assert_upgrades_to, net

V0_NET = '''
name: "V0Net"
input: "extra"
layers {
  layer {
    name: "data" type: "data" source: "train-leveldb" meanfile: "mean.binaryproto"
    batchsize: 256 cropsize: 227 mirror: true
  }
  top: "data" top: "label"
}
layers { layer { name: "pad1" type: "padding" pad: 2 } bottom: "data" top: "pad1" }
layers {
  layer {
    name: "conv1" type: "conv" num_output: 96 kernelsize: 11 stride: 4 group: 2
    weight_filler { type: "gaussian" std: 0.01 } bias_filler { type: "constant" value: 1 }
    blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0
  }
  bottom: "pad1" top: "conv1"
}
layers { layer { name: "relu1" type: "relu" } bottom: "conv1" top: "conv1" }
layers { layer { name: "pad2" type: "padding" pad: 1 } bottom: "conv1" top: "pad2" }
layers {
  layer { name: "pool1" type: "pool" pool: AVE kernelsize: 3 stride: 2 }
  bottom: "pad2" top: "pool1"
}
layers {
  layer { name: "norm1" type: "lrn" local_size: 5 alpha: 0.0001 beta: 0.75 k: 2 }
  bottom: "pool1" top: "norm1"
}
layers { layer { name: "drop" type: "dropout" dropout_ratio: 0.3 } bottom: "norm1" top: "norm1" }
layers {
  layer { name: "fc8" type: "innerproduct" num_output: 10 biasterm: false }
  bottom: "norm1" top: "fc8"
}
layers { layer { name: "cat" type: "concat" concat_dim: 1 } bottom: "fc8" bottom: "extra"
         top: "cat" }
layers { layer { name: "loss" type: "softmax_loss" } bottom: "fc8" bottom: "label" }
'''

V0_EXPECTED = '''
name: "V0Net"
layer {
  name: "data" type: "Data" top: "data" top: "label"
  transform_param { crop_size: 227 mirror: true mean_file: "mean.binaryproto" }
  data_param { source: "train-leveldb" batch_size: 256 }
}
layer {
  name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  param { lr_mult: 1 decay_mult: 1 }
  param { lr_mult: 2 decay_mult: 0 }
  convolution_param {
    num_output: 96 pad: 2 kernel_size: 11 group: 2 stride: 4
    weight_filler { type: "gaussian" std: 0.01 } bias_filler { type: "constant" value: 1 }
  }
}
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer {
  name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }
}
layer {
  name: "norm1" type: "LRN" bottom: "pool1" top: "norm1"
  lrn_param { local_size: 5 alpha: 0.0001 beta: 0.75 k: 2 }
}
layer { name: "drop" type: "Dropout" bottom: "norm1" top: "norm1"
        dropout_param { dropout_ratio: 0.3 } }
layer {
  name: "fc8" type: "InnerProduct" bottom: "norm1" top: "fc8"
  inner_product_param { num_output: 10 bias_term: false }
}
layer { name: "cat" type: "Concat" bottom: "fc8" bottom: "extra" top: "cat"
        concat_param { concat_dim: 1 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc8" bottom: "label" }
'''


def test_v0_net_with_padding_layers(log_lines):
    assert_upgrades_to(V0_NET, V0_EXPECTED, source="v0.prototxt")
    messages = log_lines.messages()
    assert ("Attempting to upgrade input file specified using deprecated V0LayerParameter: "
            "v0.prototxt") in messages
    assert "Successfully upgraded file specified using deprecated V0LayerParameter" in messages
    assert ("Attempting to upgrade input file specified using deprecated input fields: "
            "v0.prototxt") in messages


def test_v0_field_without_home_is_dropped_with_an_error(log_lines):
    old = 'layers { layer { name: "r" type: "relu" num_output: 3 } bottom: "x" top: "x" }'
    upgraded = upgrade_net(net('input: "x" ' + old))
    assert text_format.MessageToString(upgraded.layer[0]) == text_format.MessageToString(
        caffe_pb2.LayerParameter(name="r", type="ReLU", bottom=["x"], top=["x"]))
    errors = log_lines.messages(level=40)
    assert "Unknown parameter num_output for layer type relu" in errors
    assert any("had one or more problems upgrading V0NetParameter" in m for m in errors)


@pytest.mark.parametrize("text, message", [
    ('layers { layer { name: "q" type: "quux" } }', 'layer "q": unknown V0 layer type "quux"'),
    ('input: "x" layers { layer { name: "p" type: "padding" pad: 1 } bottom: "x" top: "p" } '
     'layers { layer { name: "r" type: "relu" } bottom: "p" top: "r" }',
     'layer "r": a V0 padding layer feeds a layer of type "relu"'),
    ('layers { layer { name: "c" type: "conv" } bottom: "nowhere" top: "c" }',
     'layer "c": unknown bottom blob "nowhere"'),
    ('layers { layer { name: "a" type: "relu" } } layers { name: "b" type: RELU }',
     'layer "b": V1 layer definition in a net that also has V0'),
])
def test_v0_errors(text, message):
    with pytest.raises(CaffeError, match=message):
        upgrade_net(net(text))
