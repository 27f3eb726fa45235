"""ReLU: forward and backward against numpy for several slopes (0, -0 and NaN among the
inputs), gradients (away from the kink), in place; on both engines, the GPU's bit for bit the
CPU's."""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import assert_in_place_matches, set_up
from tests.numerics import close_to

SHAPES = [(2, 3, 4, 5), (7,), (3, 6)]
SLOPES = [0.0, 0.01, 0.5]


def relu(slope):
    return f'name: "relu" type: "ReLU" relu_param {{ negative_slope: {slope} }}'


def inputs(shape, seed=0):
    x = np.random.default_rng(seed).uniform(-1, 1, shape)
    x[np.abs(x) < 0.05] = 0.5  # keep clear of the kink for the gradient check
    return x


def forward_backward(text, x, dy):
    """(top data, bottom diff) of one forward and backward in the current mode."""
    layer, bottom, top = set_up(text, [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    y = top[0].cpu_data.copy()
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    return y, bottom[0].cpu_diff.copy()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("slope", SLOPES)
def test_forward_backward(engine, shape, slope):
    x = inputs(shape)
    x.flat[:3] = [0.0, -0.0, np.nan]
    dy = np.random.default_rng(5).normal(size=shape).astype(np.float32)
    y, dx = forward_backward(relu(slope), x, dy)
    xf = x.astype(np.float32)
    np.testing.assert_allclose(y, np.where(xf > 0, xf, np.float32(slope) * xf), rtol=1e-6)
    # Caffe's factor (x > 0) + slope (x <= 0): 0 for NaN
    factor = (xf > 0).astype(np.float32) + np.float32(slope) * (xf <= 0).astype(np.float32)
    close_to(dx, dy * factor, rtol=1e-6)
    if engine == "gpu":
        # the same per-element bodies run on both targets: the same bits
        backend.set_mode_cpu()
        cpu_y, cpu_dx = forward_backward(relu(slope), x, dy)
        np.testing.assert_allclose(y, cpu_y, rtol=0, atol=0)
        np.testing.assert_allclose(dx, cpu_dx, rtol=0, atol=0)


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
