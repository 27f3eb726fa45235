"""MVN: forward against numpy for every parameter combination, Caffe's backward, gradients."""
import sys

import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import engine_cases
from tests.layer_helpers import blob_of, empty_blobs, layer_param, set_up

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


def eps_of(params):
    return float(params.split("eps: ")[1]) if "eps" in params else 1e-9


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("params, normalize, across", PARAMS)
def test_forward(shape, params, normalize, across):
    x = data(shape)
    layer, bottom, top = set_up(mvn(params), [x])
    layer.forward(bottom, top)
    assert top[0].shape == shape
    np.testing.assert_allclose(top[0].data, reference(x, normalize, across, eps_of(params)),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("params, normalize, across", PARAMS)
def test_backward_is_caffes_formula(params, normalize, across):
    x, dy = data((2, 3, 4)), data((2, 3, 4), seed=1)
    layer, bottom, top = set_up(mvn(params), [x])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    rows = 2 if across else 6
    d = dy.reshape(rows, -1).astype(np.float64)
    expected = d - d.mean(axis=1, keepdims=True)
    if normalize:
        xr = x.reshape(rows, -1).astype(np.float64)
        centred = xr - xr.mean(axis=1, keepdims=True)
        sigma = np.sqrt((centred ** 2).mean(axis=1, keepdims=True)) + eps_of(params)
        y = centred / sigma
        expected = (expected - (d * y).mean(axis=1, keepdims=True) * y) / sigma
    np.testing.assert_allclose(bottom[0].diff, expected.reshape(x.shape), rtol=1e-4,
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


def test_in_place():
    x, dy = data((2, 3, 4)), data((2, 3, 4), seed=1)
    layer, bottom, top = set_up(mvn(), [x])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    in_place = create_layer(layer_param(mvn()))
    blob = blob_of(x)
    in_place.setup([blob], [blob])
    in_place.forward([blob], [blob])
    np.testing.assert_allclose(blob.data, top[0].data, rtol=1e-6)
    blob.diff[...] = dy
    in_place.backward([blob], [True], [blob])
    np.testing.assert_allclose(blob.diff, bottom[0].diff, rtol=1e-5, atol=1e-6)


def test_blob_counts():
    with pytest.raises(CaffeError, match='"mvn"'):
        create_layer(layer_param(mvn())).setup([blob_of(data((2, 3)))] * 2, empty_blobs(1))


def test_v1_name():
    from pycaffe_cli.layers.base import v1_type_name
    assert v1_type_name("MVN") == "MVN"


# --- GPU mode: the device path gives the CPU's numbers ------------------------------------------
@pytest.fixture
def quick_barriers():
    """The CUDA simulator's syncthreads waits for every thread of the block to get the GIL:
    switching threads more often makes the per-row reductions ~10x quicker."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    yield
    sys.setswitchinterval(interval)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (3, 2, 1, 6), (2, 3)])
@pytest.mark.parametrize("params", [p for p, _, _ in PARAMS])
def test_gpu_matches_cpu(quick_barriers, shape, params):
    from tests.gpu_helpers import compare_layer_modes
    x, dy = data(shape), data(shape, seed=1)
    # per-row sums add in another order on the device; |y| is up to ~3
    compare_layer_modes(mvn(params), [x], top_diffs=[dy], rtol=1e-5, atol=1e-5)


def test_gpu_rows_longer_than_a_block(quick_barriers):
    """Rows of 80 values: each of a block's 32 threads adds several (the conftest's grid)."""
    from tests.gpu_helpers import compare_layer_modes
    x, dy = data((2, 2, 8, 10)), data((2, 2, 8, 10), seed=1)
    compare_layer_modes(mvn("across_channels: true"), [x], top_diffs=[dy], atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("params", ["", "normalize_variance: false"])
def test_gpu_in_place_matches_cpu(quick_barriers, params):
    x, dy = data((2, 3, 4)), data((2, 3, 4), seed=1)
    results = []
    for gpu in (False, True):
        layer = create_layer(layer_param(mvn(params)))
        blob = blob_of(x)
        if gpu:
            backend.set_mode_gpu(0)
        try:
            layer.setup([blob], [blob])
            layer.forward([blob], [blob])
            y = blob.cpu_data.copy()
            blob.diff[...] = dy
            layer.backward([blob], [True], [blob])
        finally:
            backend.set_mode_cpu()
        results.append((y, blob.cpu_diff.copy()))
    (cpu_y, cpu_dx), (gpu_y, gpu_dx) = results
    np.testing.assert_allclose(gpu_y, cpu_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gpu_dx, cpu_dx, rtol=1e-5, atol=1e-5)
