"""PReLU: slope blob shapes and default fill, forward against numpy (per channel and shared),
gradients for data and slopes, slope-gradient accumulation, agreement with ReLU, in-place use,
and the user errors; on both engines, the GPU's slope-gradient reduction on any grid."""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda import launch
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import blob_of, layer_param, set_up

SHAPES = [(2, 3, 4, 5), (2, 3), (3, 4, 2)]


def prelu(shared=False, filler=""):
    return (f'name: "prelu" type: "PReLU" prelu_param {{ channel_shared: '
            f'{str(shared).lower()} {filler} }}')


GAUSSIAN = 'filler { type: "gaussian" std: 1 }'


def inputs(shape, seed=0):
    x = np.random.default_rng(seed).normal(size=shape)
    x[np.abs(x) < 0.05] = 0.5  # keep clear of the kink for the gradient checks
    return x.astype(np.float32)


def reference(x, slopes, shared):
    a = slopes.reshape(()) if shared else slopes.reshape((1, -1) + (1,) * (x.ndim - 2))
    return np.maximum(x, 0) + a * np.minimum(x, 0)


@pytest.mark.parametrize("shared, shape", [(False, (3,)), (True, ())])
def test_slope_blob_shape_and_default_value(shared, shape):
    layer, _, _ = set_up(prelu(shared), [np.ones((2, 3, 4))])
    assert len(layer.blobs) == 1
    assert layer.blobs[0].shape == shape  # Caffe: (channels,) or a 0-axis scalar blob
    np.testing.assert_array_equal(layer.blobs[0].data, np.full(shape, 0.25, np.float32))


@pytest.mark.parametrize("shared", [False, True])
def test_filler_is_used(shared):
    backend.set_random_seed(5)
    text = prelu(shared, 'filler { type: "uniform" min: 0.5 max: 0.75 }')
    layer, _, _ = set_up(text, [np.ones((2, 6, 2))])
    slopes = layer.blobs[0].flat_data
    assert slopes.size == (1 if shared else 6)
    assert np.all((slopes >= 0.5) & (slopes <= 0.75)) and np.unique(slopes).size == slopes.size


@pytest.mark.parametrize("shared", [False, True])
def test_fan_based_filler_on_slopes(shared):
    layer, _, _ = set_up(prelu(shared, 'filler { type: "xavier" }'), [np.ones((2, 4, 3))])
    # Caffe's fans for a (C,) or scalar blob: fan_in = 1, so xavier draws from U(-sqrt 3, sqrt 3)
    assert np.all(np.abs(layer.blobs[0].flat_data) <= np.sqrt(3))


@pytest.mark.parametrize("shape", SHAPES + [(2, 3, 8, 8)])
@pytest.mark.parametrize("shared", [False, True])
def test_forward(engine, shape, shared):
    x = inputs(shape)
    layer, bottom, top = set_up(prelu(shared, GAUSSIAN), [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    expected = reference(x, layer.blobs[0].data, shared)
    np.testing.assert_array_equal(top[0].data, expected)


GRADIENT_CASES = [(shape, shared) for shared in (False, True) for shape in [(2, 3, 2, 2), (2, 3)]]


@pytest.mark.parametrize("engine, shape, shared",
                         engine_cases(GRADIENT_CASES, GRADIENT_CASES, unpack=True),
                         indirect=["engine"])
def test_gradient(engine, shape, shared):
    layer, bottom, top = set_up(prelu(shared, GAUSSIAN), [inputs(shape, 1)])
    # every element singly (random mode: the exhaustive mode cannot walk a 0-axis blob)
    check_gradient(layer, bottom, top, threshold=1e-3, kink=0.0, kink_range=0.01,
                   elements=24)


BACKWARD_CASES = [(shape, shared, True, None) for shared in (False, True)
                  for shape in SHAPES + [(2, 3, 8, 8)]]
# GPU: fewer blocks than channel parts (blocks loop over them) and several blocks per channel
# (partials added by the second kernel), the slopes' gradient alone.
GRID_CASES = [((4, 3, 8, 8), shared, False, max_blocks) for shared in (False, True)
              for max_blocks in (1, 2, 8)]


@pytest.mark.parametrize("engine, shape, shared, down, max_blocks", engine_cases(
    BACKWARD_CASES, BACKWARD_CASES + GRID_CASES, unpack=True), indirect=["engine"])
def test_backward_values_and_slope_accumulation(engine, monkeypatch, shape, shared, down,
                                                max_blocks):
    if max_blocks is not None:
        monkeypatch.setattr(launch, "MAX_BLOCKS", max_blocks)
    x = inputs(shape, 2)
    dy = np.random.default_rng(3).normal(size=x.shape).astype(np.float32)
    layer, bottom, top = set_up(prelu(shared, GAUSSIAN), [x])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.blobs[0].diff[...] = 0
    bottom[0].diff[...] = 9
    layer.backward(top, [down], bottom)
    a = layer.blobs[0].cpu_data
    terms = dy.astype(np.float64) * x * (x <= 0)
    others = (0,) + tuple(range(2, x.ndim))
    slope_grad = terms.sum() if shared else terms.sum(axis=others)
    np.testing.assert_allclose(layer.blobs[0].cpu_diff, slope_grad, rtol=1e-5, atol=1e-6)
    a_c = a.reshape(()) if shared else a.reshape((1, -1) + (1,) * (x.ndim - 2))
    np.testing.assert_array_equal(bottom[0].cpu_diff, np.where(x > 0, dy, dy * a_c) if down
                                  else 9)
    layer.backward(top, [down], bottom)  # param diffs accumulate
    np.testing.assert_allclose(layer.blobs[0].cpu_diff, 2 * slope_grad, rtol=1e-5,
                               atol=1e-6)


def test_no_param_or_bottom_gradient_when_switched_off(engine):
    layer, bottom, top = set_up(prelu(), [inputs((2, 3, 4), 4)])
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    layer.blobs[0].diff[...] = 7
    bottom[0].diff[...] = 9
    layer.param_propagate_down = [False]
    layer.backward(top, [False], bottom)
    assert np.all(layer.blobs[0].cpu_diff == 7) and np.all(bottom[0].cpu_diff == 9)


def test_matches_relu_with_slope_quarter():
    x = inputs((2, 3, 4, 5), 5)
    dy = np.random.default_rng(6).normal(size=x.shape)
    outputs = []
    for text in (prelu(), 'name: "relu" type: "ReLU" relu_param { negative_slope: 0.25 }'):
        layer, bottom, top = set_up(text, [x])
        layer.forward(bottom, top)
        top[0].diff[...] = dy
        layer.backward(top, [True], bottom)
        outputs.append((top[0].data.copy(), bottom[0].diff.copy()))
    np.testing.assert_array_equal(outputs[0][0], outputs[1][0])
    np.testing.assert_array_equal(outputs[0][1], outputs[1][1])


@pytest.mark.parametrize("shared", [False, True])
def test_in_place_matches_out_of_place(engine, shared):
    x = inputs((2, 3, 4), 7)
    dy = np.random.default_rng(8).normal(size=x.shape)
    results = []
    for in_place in (False, True):
        backend.set_random_seed(9)
        layer = create_layer(layer_param(prelu(shared, GAUSSIAN)))
        bottom = blob_of(x)
        top = bottom if in_place else Blob()
        layer.setup([bottom], [top])
        layer.forward([bottom], [top])
        y = top.cpu_data.copy()
        top.diff[...] = dy
        layer.backward([top], [True], [bottom])
        results.append((y, bottom.cpu_diff.copy(), layer.blobs[0].cpu_diff.copy()))
    for out_of_place, in_place in zip(*results):
        np.testing.assert_array_equal(out_of_place, in_place)
    assert np.any(results[1][2] != 0)


def test_bottom_needs_two_axes():
    with pytest.raises(CaffeError, match='"prelu".*Number of axes'):
        set_up(prelu(), [np.ones(4)])


@pytest.mark.parametrize("shared, count", [(False, 4), (False, 1), (True, 3)])
def test_given_slopes_must_match(shared, count):
    param = layer_param(prelu(shared))
    Blob((count,)).to_proto(param.blobs.add())
    layer = create_layer(param)
    with pytest.raises(CaffeError, match='"prelu".*Negative slope size is inconsistent'):
        layer.setup([blob_of(np.ones((2, 3, 2)))], [Blob()])


def test_given_slopes_are_used():
    param = layer_param(prelu())
    blob_of([0.1, 0.2, 0.3]).to_proto(param.blobs.add())
    layer = create_layer(param)
    bottom, top = blob_of(-np.ones((1, 3, 2))), Blob()
    layer.setup([bottom], [top])
    layer.forward([bottom], [top])
    np.testing.assert_allclose(top.data[0, :, 0], [-0.1, -0.2, -0.3])


def test_reshape_to_other_channel_count_is_an_error():
    layer, bottom, top = set_up(prelu(), [np.ones((2, 3, 4))])
    bottom[0].reshape((2, 5, 4))
    with pytest.raises(CaffeError, match='"prelu".*5 channels'):
        layer.forward(bottom, top)
