"""The layers call each numba kernel with one kind of argument whatever their options (a bias
or none, a mean or none): numba compiles a kernel once for every distinct tuple of argument
types, read-only and writable arrays being different types, and the parallel kernels take
seconds each to compile. Recorded by wrapping the kernels, so nothing extra is compiled."""
import numba
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.data.transformer import DataTransformer
from pycaffe_cli.inference.plan import InferencePlan
from pycaffe_cli.layers.kernels.cpu import conv_image, winograd, winograd_image
from pycaffe_cli.proto import caffe_pb2
from tests.layers.conv_helpers import forced_winograd
from tests.test_inference import build, fill_randomly

CONVOLUTIONS = """
layer {{ name: "data" type: "Input" top: "data"
        input_param {{ shape {{ dim: {num} dim: 32 dim: 16 dim: 16 }} }} }}
layer {{ name: "biased" type: "Convolution" bottom: "data" top: "a"
        convolution_param {{ num_output: 32 kernel_size: {kernel} pad: {pad} }} }}
layer {{ name: "plain" type: "Convolution" bottom: "a" top: "b"
        convolution_param {{ num_output: 32 kernel_size: {kernel} pad: {pad}
                             bias_term: false }} }}
"""


def recording(kernel, calls):
    """``kernel``, appending each call's argument types to ``calls``."""
    def record(*args):
        calls.append(tuple(numba.typeof(arg) for arg in args))
        return kernel(*args)
    return record


def recorded(monkeypatch, module, name):
    """Wrap ``module.name`` (``recording``): the list of its calls' argument types."""
    calls = []
    monkeypatch.setattr(module, name, recording(getattr(module, name), calls))
    return calls


@pytest.mark.parametrize("num, kernel, pad, module, name", [
    (1, 1, 0, conv_image, "forward"),
    (1, 3, 1, winograd_image, "forward"),
    (2, 3, 1, winograd, "output_transform"),
    (2, 3, 1, winograd, "input_transform")])
def test_convolutions_with_and_without_bias_call_one_signature(num, kernel, pad, module, name,
                                                               monkeypatch):
    backend.set_mode_cpu()
    calls = recorded(monkeypatch, module, name)
    with forced_winograd(kernel == 3):
        net = build(CONVOLUTIONS.format(num=num, kernel=kernel, pad=pad))
        fill_randomly(net, np.random.default_rng(0))
        InferencePlan(net).forward()
    assert len(calls) >= 2   # both layers ran the kernel
    assert len(set(calls)) == 1, set(calls)


def test_the_batch_transform_takes_one_signature_for_every_kind_of_mean(monkeypatch):
    from pycaffe_cli.data import transformer
    calls, runner = [], transformer._transform_runner
    monkeypatch.setattr(transformer, "_transform_runner", lambda: recording(runner(), calls))
    src = np.random.default_rng(1).integers(0, 256, (2, 3, 6, 6), dtype=np.uint8)
    for means in ({}, {"mean_value": [1.0, 2.0, 3.0]}, None):
        param = caffe_pb2.TransformationParameter(scale=0.5, **(means or {}))
        transform = DataTransformer(param, caffe_pb2.TEST)
        if means is None:  # a mean image, as a mean_file gives
            transform.mean_image = np.ones((3, 6, 6), np.float32)
        transform.transform_batch(src, np.empty((2, 3, 6, 6), np.float32))
    assert len(calls) == 3 and len(set(calls)) == 1, calls
