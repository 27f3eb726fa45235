"""Build a Caffe deploy net (LeNet, CaffeNet, AlexNet, GoogLeNet, ResNet-50, MobileNet v2) as a
PyTorch module.

Only for the benchmark's optional comparison column (``scripts/bench --torch``); PyTorch is never
a dependency of pycaffe. Supports Convolution, Pooling (ceil mode, as Caffe), LRN, ReLU, ReLU6,
Dropout, InnerProduct, Softmax, BatchNorm (with the batch's statistics in training mode, as
Caffe's TRAIN phase), Scale, Eltwise sums and Concat, wired by their blob names; the module
returns the last layer's top.
"""
import torch
from torch import nn

from pycaffe_cli.io.prototxt import read_net_param
from pycaffe_cli.proto import caffe_pb2


class _Scale(nn.Module):
    """Caffe's Scale over the channel axis, with its optional bias."""

    def __init__(self, channels, bias):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels)) if bias else None

    def forward(self, x):
        y = x * self.scale.view(1, -1, 1, 1)
        return y if self.bias is None else y + self.bias.view(1, -1, 1, 1)


def _conv(layer, channels):
    p = layer.convolution_param
    module = nn.Conv2d(channels, p.num_output, p.kernel_size[0],
                       stride=p.stride[0] if p.stride else 1, padding=p.pad[0] if p.pad else 0,
                       groups=p.group, bias=p.bias_term)
    return module, p.num_output


def _pool(layer, channels):
    p = layer.pooling_param
    maximum = p.pool == caffe_pb2.PoolingParameter.MAX
    if p.global_pooling:
        return (nn.AdaptiveMaxPool2d(1) if maximum else nn.AdaptiveAvgPool2d(1)), channels
    kind = nn.MaxPool2d if maximum else nn.AvgPool2d
    return kind(p.kernel_size, stride=p.stride, padding=p.pad, ceil_mode=True), channels


def _inner_product(layer, channels):
    return nn.Sequential(nn.Flatten(), nn.LazyLinear(layer.inner_product_param.num_output)), None


def _lrn(layer, channels):
    p = layer.lrn_param
    return nn.LocalResponseNorm(p.local_size, p.alpha, p.beta, p.k), channels


def _batch_norm(layer, channels):
    return nn.BatchNorm2d(channels, eps=layer.batch_norm_param.eps, affine=False), channels


BUILDERS = {
    "Convolution": _conv,
    "Pooling": _pool,
    "InnerProduct": _inner_product,
    "LRN": _lrn,
    "ReLU": lambda layer, c: (nn.ReLU(), c),
    "ReLU6": lambda layer, c: (nn.ReLU6(), c),
    "Dropout": lambda layer, c: (nn.Dropout(layer.dropout_param.dropout_ratio), c),
    "Softmax": lambda layer, c: (nn.Softmax(dim=1), c),
    "BatchNorm": _batch_norm,
    "Scale": lambda layer, c: (_Scale(c, layer.scale_param.bias_term), c),
}


class CaffeGraph(nn.Module):
    """The layers in the prototxt's order, each reading its bottoms by name."""

    def __init__(self, param):
        super().__init__()
        self.input = param.layer[0].top[0]
        channels = {self.input: param.layer[0].input_param.shape[0].dim[1]}
        self.steps, self.layers = [], nn.ModuleList()
        for layer in param.layer[1:]:
            if layer.type == "Eltwise":
                p = layer.eltwise_param
                if p.operation != caffe_pb2.EltwiseParameter.SUM or p.coeff:
                    raise ValueError("torch_reference: only Eltwise sums without coefficients")
                out = channels[layer.bottom[0]]
            elif layer.type == "Concat":
                out = sum(channels[bottom] for bottom in layer.bottom)
            elif layer.type in BUILDERS:
                module, out = BUILDERS[layer.type](layer, channels[layer.bottom[0]])
                self.layers.append(module)
            else:
                raise ValueError(f"torch_reference: unsupported layer type {layer.type}")
            self.steps.append((layer.type, len(self.layers) - 1, list(layer.bottom),
                               layer.top[0]))
            channels[layer.top[0]] = out

    def forward(self, x):
        blobs = {self.input: x}
        for kind, index, bottoms, top in self.steps:
            if kind == "Eltwise":
                y = blobs[bottoms[0]]
                for bottom in bottoms[1:]:
                    y = y + blobs[bottom]
            elif kind == "Concat":
                y = torch.cat([blobs[bottom] for bottom in bottoms], 1)
            else:
                y = self.layers[index](blobs[bottoms[0]])
            blobs[top] = y
        return y


def build_torch_net(path):
    """The module of the deploy net at ``path``, in training mode, initialised by a dry run
    on the Input shape."""
    param = read_net_param(path)
    net = CaffeGraph(param)
    net(torch.zeros(*param.layer[0].input_param.shape[0].dim))
    return net
