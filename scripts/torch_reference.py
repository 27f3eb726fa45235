"""Build a chain-shaped Caffe deploy net (LeNet, CaffeNet, AlexNet) as a PyTorch module.

Only for the benchmark's optional comparison column (``scripts/bench --torch``); PyTorch is never
a dependency of pycaffe. Supports Convolution, Pooling (ceil mode, as Caffe), LRN, ReLU,
Dropout, InnerProduct and Softmax layers in a single chain.
"""
import torch
from torch import nn

from pycaffe_cli.io.prototxt import read_net_param
from pycaffe_cli.proto import caffe_pb2


def _conv(layer, channels):
    p = layer.convolution_param
    module = nn.Conv2d(channels, p.num_output, p.kernel_size[0],
                       stride=p.stride[0] if p.stride else 1, padding=p.pad[0] if p.pad else 0,
                       groups=p.group, bias=p.bias_term)
    return module, p.num_output


def _pool(layer, channels):
    p = layer.pooling_param
    kind = nn.MaxPool2d if p.pool == caffe_pb2.PoolingParameter.MAX else nn.AvgPool2d
    return kind(p.kernel_size, stride=p.stride, padding=p.pad, ceil_mode=True), channels


def _inner_product(layer, channels):
    return nn.LazyLinear(layer.inner_product_param.num_output), None


BUILDERS = {
    "Convolution": _conv,
    "Pooling": _pool,
    "LRN": lambda l, c: (nn.LocalResponseNorm(l.lrn_param.local_size, l.lrn_param.alpha,
                                              l.lrn_param.beta, l.lrn_param.k), c),
    "ReLU": lambda l, c: (nn.ReLU(inplace=True), c),
    "Dropout": lambda l, c: (nn.Dropout(l.dropout_param.dropout_ratio), c),
    "Softmax": lambda l, c: (nn.Softmax(dim=1), c),
}


def build_torch_net(path):
    """nn.Sequential equivalent of the deploy net at ``path`` (flattening before the first
    InnerProduct), initialised by a dry run on the Input shape."""
    param = read_net_param(path)
    shape = list(param.layer[0].input_param.shape[0].dim)
    channels, modules, flat = shape[1], [], False
    for layer in param.layer[1:]:
        if layer.type == "InnerProduct" and not flat:
            modules.append(nn.Flatten())
            flat = True
        builder = BUILDERS.get(layer.type, _inner_product if layer.type == "InnerProduct"
                               else None)
        if builder is None:
            raise ValueError(f"torch_reference: unsupported layer type {layer.type}")
        module, channels = builder(layer, channels)
        modules.append(module)
    net = nn.Sequential(*modules)
    net(torch.zeros(*shape))
    return net
