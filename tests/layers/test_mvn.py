"""MVN: forward against numpy for every parameter combination, Caffe's backward, gradients,
in-place use; on both engines (on the GPU also rows longer than a thread block)."""
import sys

import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import blob_of, empty_blobs, layer_param, set_up
from tests.numerics import close_to

SHAPES = [(2, 3, 4, 5), (2, 3, 4), (3, 2, 1, 6)]
PARAMS = [
    ("", True, False),
    ("normalize_variance: false", False, False),
    ("across_channels: true", True, True),
    ("normalize_variance: false across_channels: true", False, True),
    ("eps: 0.1", True, False),
]


def mvn(params=""):
    return f'name: "mvn" type: "MVN" mvn_param {{ {params} }}'


def data(shape, seed=0):
    return (np.random.default_rng(seed).normal(size=shape) * 3 + 2).astype(np.float32)


def reference(x, normalize_variance, across_channels, eps):
    rows = x.reshape(x.shape[0] if across_channels else x.shape[0] * x.shape[1], -1)
    rows = rows.astype(np.float64)
    centred = rows - rows.mean(axis=1, keepdims=True)
    if normalize_variance:
        centred /= np.sqrt((centred ** 2).mean(axis=1, keepdims=True)) + eps
    return centred.reshape(x.shape)


@pytest.fixture
def quick_barriers():
    """The CUDA simulator's syncthreads waits for every thread of the block to get the GIL:
    switching threads more often makes the per-row reductions ~10x quicker."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    yield
    sys.setswitchinterval(interval)


def eps_of(params):
    return float(params.split("eps: ")[1]) if "eps" in params else 1e-9


# GPU: smaller shapes (the simulator is slow), and rows of 80 values, so that each of a block's
# 32 threads (the conftest's grid) adds several.
GPU_SHAPES = [(2, 3, 4, 5), (3, 2, 1, 6), (2, 3)]
LONG_ROWS = [((2, 2, 8, 10), "across_channels: true", True, True)]


def shape_cases(shapes):
    return [(shape,) + case for case in PARAMS for shape in shapes]


@pytest.mark.parametrize("engine, shape, params, normalize, across", engine_cases(
    shape_cases(SHAPES + [(2, 3)]), shape_cases(GPU_SHAPES) + LONG_ROWS, unpack=True),
    indirect=["engine"])
def test_forward(engine, quick_barriers, shape, params, normalize, across):
    x = data(shape)
    layer, bottom, top = set_up(mvn(params), [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    assert top[0].shape == shape
    np.testing.assert_allclose(top[0].data, reference(x, normalize, across, eps_of(params)),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("engine, shape, params, normalize, across", engine_cases(
    shape_cases([(2, 3, 4)] + GPU_SHAPES), shape_cases(GPU_SHAPES) + LONG_ROWS, unpack=True),
    indirect=["engine"])
def test_backward_is_caffes_formula(engine, quick_barriers, shape, params, normalize, across):
    x, dy = data(shape), data(shape, seed=1)
    layer, bottom, top = set_up(mvn(params), [x])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    rows = shape[0] if across else shape[0] * shape[1]
    d = dy.reshape(rows, -1).astype(np.float64)
    expected = d - d.mean(axis=1, keepdims=True)
    if normalize:
        xr = x.reshape(rows, -1).astype(np.float64)
        centred = xr - xr.mean(axis=1, keepdims=True)
        sigma = np.sqrt((centred ** 2).mean(axis=1, keepdims=True)) + eps_of(params)
        y = centred / sigma
        expected = (expected - (d * y).mean(axis=1, keepdims=True) * y) / sigma
    np.testing.assert_allclose(bottom[0].cpu_diff, expected.reshape(x.shape), rtol=1e-4,
                               atol=1e-5)


GRADIENT_PARAMS = ["", "normalize_variance: false", "across_channels: true",
                   "normalize_variance: false across_channels: true"]


@pytest.mark.parametrize("engine, shape, params", engine_cases(
    [(shape, params) for params in GRADIENT_PARAMS for shape in SHAPES],
    [((2, 2, 3), params) for params in GRADIENT_PARAMS[:3]], unpack=True),
    indirect=["engine"])
def test_gradient(engine, quick_barriers, shape, params):
    layer, bottom, top = set_up(mvn(params), [data(shape)])
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize("params", ["", "normalize_variance: false"])
def test_in_place(engine, quick_barriers, params):
    x, dy = data((2, 3, 4)), data((2, 3, 4), seed=1)
    layer, bottom, top = set_up(mvn(params), [x])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    in_place = create_layer(layer_param(mvn(params)))
    blob = blob_of(x)
    in_place.setup([blob], [blob])
    in_place.forward([blob], [blob])
    close_to(blob.cpu_data, top[0].cpu_data, rtol=1e-6)
    blob.diff[...] = dy
    in_place.backward([blob], [True], [blob])
    np.testing.assert_allclose(blob.cpu_diff, bottom[0].cpu_diff, rtol=1e-5, atol=1e-6)


def test_blob_counts():
    with pytest.raises(CaffeError, match='"mvn"'):
        create_layer(layer_param(mvn())).setup([blob_of(data((2, 3)))] * 2, empty_blobs(1))


def test_v1_name():
    from pycaffe_cli.layers.base import v1_type_name
    assert v1_type_name("MVN") == "MVN"
