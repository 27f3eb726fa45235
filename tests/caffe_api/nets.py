"""Prototxt texts shared by the ``caffe`` interface tests."""


def conv_ip_loss(num_output=13):
    """DummyData -> Convolution -> InnerProduct -> SoftmaxWithLoss, force_backward."""
    return f"""
    name: "testnet" force_backward: true
    layer {{ type: "DummyData" name: "data" top: "data" top: "label"
      dummy_data_param {{ num: 5 channels: 2 height: 3 width: 4
        num: 5 channels: 1 height: 1 width: 1
        data_filler {{ type: "gaussian" std: 1 }} data_filler {{ type: "constant" }} }} }}
    layer {{ type: "Convolution" name: "conv" bottom: "data" top: "conv"
      convolution_param {{ num_output: 11 kernel_size: 2 pad: 3
        weight_filler {{ type: "gaussian" std: 1 }}
        bias_filler {{ type: "constant" value: 2 }} }}
      param {{ decay_mult: 1 }} param {{ decay_mult: 0 }} }}
    layer {{ type: "InnerProduct" name: "ip" bottom: "conv" top: "ip_blob"
      inner_product_param {{ num_output: {num_output}
        weight_filler {{ type: "gaussian" std: 2.5 }}
        bias_filler {{ type: "constant" value: -3 }} }} }}
    layer {{ type: "SoftmaxWithLoss" name: "loss" bottom: "ip_blob" bottom: "label"
      top: "loss" }}
    """


DEPLOY_IP = """
name: "deploy"
layer { name: "data" type: "Input" top: "data"
  input_param { shape { dim: 4 dim: 3 dim: 2 dim: 2 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 1 }
    bias_filler { type: "gaussian" std: 1 } } }
layer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" }
"""
