"""ReLU: forward against numpy for several slopes, gradients (away from the kink), in place;
the GPU path against the CPU's, bit for bit."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import compare_layer_modes
from tests.layer_helpers import assert_in_place_matches, blob_of, layer_param, set_up

SHAPES = [(2, 3, 4, 5), (7,), (3, 6)]
SLOPES = [0.0, 0.01, 0.5]


def relu(slope):
    return f'name: "relu" type: "ReLU" relu_param {{ negative_slope: {slope} }}'


def inputs(shape, seed=0):
    x = np.random.default_rng(seed).uniform(-1, 1, shape)
    x[np.abs(x) < 0.05] = 0.5  # keep clear of the kink for the gradient check
    return x


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("slope", SLOPES)
def test_forward(shape, slope):
    x = inputs(shape)
    layer, bottom, top = set_up(relu(slope), [x])
    layer.forward(bottom, top)
    xf = x.astype(np.float32)
    np.testing.assert_allclose(top[0].data, np.where(xf > 0, xf, np.float32(slope) * xf),
                               rtol=1e-6)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("slope", SLOPES)
def test_gradient(shape, slope):
    layer, bottom, top = set_up(relu(slope), [inputs(shape, 1)])
    check_gradient(layer, bottom, top, kink=0.0, kink_range=0.02)


@pytest.mark.parametrize("slope", SLOPES)
def test_in_place_matches_out_of_place(slope):
    x = inputs((4, 5), 2)
    dy = np.random.default_rng(3).normal(size=(4, 5))
    layer, bottom, top = set_up(relu(slope), [x])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    in_place = create_layer(layer_param(relu(slope)))
    blob = blob_of(x)
    in_place.setup([blob], [blob])
    in_place.forward([blob], [blob])
    np.testing.assert_array_equal(blob.data, top[0].data)
    blob.diff[...] = dy
    in_place.backward([blob], [True], [blob])
    np.testing.assert_array_equal(blob.diff, bottom[0].diff)


def test_zero_input_gets_negative_slope_gradient():
    layer, bottom, top = set_up(relu(0.25), [np.array([-1.0, 0.0, 1.0])])
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, [0.25, 0.25, 1.0])


def test_needs_one_bottom():
    with pytest.raises(CaffeError, match='"relu".*exactly 1 bottom'):
        set_up(relu(0), [np.ones(2), np.ones(2)])


# --- GPU mode ---------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (7,)])
@pytest.mark.parametrize("slope", SLOPES)
def test_gpu_matches_cpu(shape, slope):
    x = inputs(shape, 4)
    x.flat[:3] = [0.0, -0.0, np.nan]
    dy = np.random.default_rng(5).normal(size=shape)
    # the same per-element bodies run on both targets
    compare_layer_modes(relu(slope), [x], top_diffs=[dy], rtol=0, atol=0)


@pytest.mark.parametrize("slope", [0.0, 0.5])
def test_gpu_gradient(gpu_mode, slope):
    layer, bottom, top = set_up(relu(slope), [inputs((2, 3, 4), 1)])
    check_gradient(layer, bottom, top, kink=0.0, kink_range=0.02)


@pytest.mark.parametrize("slope", SLOPES)
def test_gpu_in_place(gpu_mode, slope):
    rng = np.random.default_rng(6)
    assert_in_place_matches([relu(slope)], inputs((4, 5), 2), rng.normal(size=(4, 5)))


def test_gpu_zero_input_gets_negative_slope_gradient(gpu_mode):
    layer, bottom, top = set_up(relu(0.25), [np.array([-1.0, 0.0, 1.0])])
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].read_diff(), [0.25, 0.25, 1.0])
