"""ReLU: forward against numpy for several slopes, gradients (away from the kink), in place;
the GPU path against the CPU's, bit for bit."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import compare_layer_modes, engine_cases
from tests.layer_helpers import assert_in_place_matches, set_up

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


@pytest.mark.parametrize("engine, shape, slope", engine_cases(
    [(shape, slope) for slope in SLOPES for shape in SHAPES],
    [((2, 3, 4), slope) for slope in (0.0, 0.5)], unpack=True), indirect=["engine"])
def test_gradient(engine, shape, slope):
    layer, bottom, top = set_up(relu(slope), [inputs(shape, 1)])
    check_gradient(layer, bottom, top, kink=0.0, kink_range=0.02)


@pytest.mark.parametrize("engine, slope, dy_seed", engine_cases(
    [(slope, 3) for slope in SLOPES], [(slope, 6) for slope in SLOPES], unpack=True),
    indirect=["engine"])
def test_in_place_matches_out_of_place(engine, slope, dy_seed):
    dy = np.random.default_rng(dy_seed).normal(size=(4, 5))
    assert_in_place_matches([relu(slope)], inputs((4, 5), 2), dy)


def test_zero_input_gets_negative_slope_gradient(engine):
    layer, bottom, top = set_up(relu(0.25), [np.array([-1.0, 0.0, 1.0])])
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].cpu_diff, [0.25, 0.25, 1.0])


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
