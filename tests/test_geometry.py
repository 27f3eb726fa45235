"""The window geometry rules (conv floor rule, pooling ceil rule with Caffe's pad clamp)."""
import pytest
from google.protobuf import text_format

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.kernels.geometry import (conv_geometry, conv_out_size, pool_geometry,
                                                 pool_out_size)
from pycaffe_cli.proto import caffe_pb2


@pytest.mark.parametrize("size,kernel,pad,stride,dilation,expected", [
    (28, 5, 0, 1, 1, 24), (227, 11, 0, 4, 1, 55), (13, 3, 1, 1, 1, 13), (7, 3, 0, 2, 2, 2),
    (5, 3, 1, 2, 1, 3), (4, 3, 0, 2, 1, 1)])
def test_conv_out_size(size, kernel, pad, stride, dilation, expected):
    assert conv_out_size(size, kernel, pad, stride, dilation) == expected


@pytest.mark.parametrize("size,kernel,pad,stride,expected", [
    (24, 2, 0, 2, 12), (55, 3, 0, 2, 27), (32, 3, 0, 2, 16), (6, 3, 1, 2, 4), (5, 2, 1, 2, 3),
    (4, 3, 2, 2, 3)])
def test_pool_out_size_uses_ceil_and_the_pad_clamp(size, kernel, pad, stride, expected):
    # (4, 3, 2, 2): ceil(5/2)+1 = 4 windows, but the 4th would start at 6 >= 4 + 2: clamped.
    assert pool_out_size(size, kernel, pad, stride) == expected


def conv_param(text):
    return text_format.Parse(text, caffe_pb2.ConvolutionParameter())


def test_conv_geometry_single_per_axis_and_h_w_forms():
    assert conv_geometry(conv_param("kernel_size: 3 pad: 1"), 2, "c") == (
        (3, 3), (1, 1), (1, 1), (1, 1))
    assert conv_geometry(conv_param("kernel_size: 3 kernel_size: 5 stride: 2 dilation: 2"),
                         2, "c") == ((3, 5), (0, 0), (2, 2), (2, 2))
    assert conv_geometry(conv_param("kernel_h: 3 kernel_w: 1 pad_h: 1 stride_w: 2"), 2,
                         "c") == ((3, 1), (1, 0), (1, 2), (1, 1))
    assert conv_geometry(conv_param("kernel_size: 2"), 3, "c")[0] == (2, 2, 2)


@pytest.mark.parametrize("text,message", [
    ("", "kernel size must be specified"),
    ("kernel_size: 3 kernel_h: 3 kernel_w: 3", "not both"),
    ("kernel_h: 3", "must be given together"),
    ("kernel_size: 1 kernel_size: 2 kernel_size: 3", "once per spatial axis"),
    ("kernel_size: 3 stride: 0", "stride dimensions must be positive")])
def test_conv_geometry_errors_name_the_layer(text, message):
    with pytest.raises(CaffeError, match=f'layer "conv": .*{message}'):
        conv_geometry(conv_param(text), 2, "conv")


def test_pool_geometry_global_and_errors():
    param = caffe_pb2.PoolingParameter(global_pooling=True)
    assert pool_geometry(param, 7, 5, "p") == ((7, 5), (0, 0), (1, 1))
    with pytest.raises(CaffeError, match="pad .* must be smaller than kernel"):
        pool_geometry(caffe_pb2.PoolingParameter(kernel_size=2, pad=2), 8, 8, "p")
    with pytest.raises(CaffeError, match="filter size cannot be specified"):
        pool_geometry(caffe_pb2.PoolingParameter(global_pooling=True, kernel_size=2), 8, 8, "p")
