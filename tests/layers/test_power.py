"""Power: forward and backward against numpy for power 0, 1, 2, 0.37 and 3 with scales and
shifts, gradients (positive bases where the power needs them), Caffe's special cases, in-place
use; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.layers.base import v1_type_name
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import (SHIFT_DOWN, assert_in_place_matches, set_up)

SHAPES = [(2, 3, 4, 5), (3, 6)]
POWERS = [0.0, 1.0, 2.0, 0.37, 3.0]
SCALE_SHIFTS = [(1.0, 0.0), (0.83, 0.0), (0.83, -2.4), (-0.5, 1.5), (0.0, 2.4)]


def power_layer(power, scale, shift):
    return (f'name: "pow" type: "Power" power_param {{ power: {power} scale: {scale} '
            f'shift: {shift} }}')


def inputs(shape, power, scale, shift, seed):
    """Gaussian values; for non-integer powers mirrored so that shift + scale * x >= 0.1,
    as Caffe's power test does (a negative base has no real non-integer power)."""
    x = np.random.default_rng(seed).normal(size=shape)
    if power != int(power) and scale != 0:
        base = shift + scale * x
        x = np.where(base < 0.1, (0.1 + np.abs(base) - shift) / scale, x)
    return x.astype(np.float32)


def reference(x, power, scale, shift):
    base = shift + scale * np.asarray(x, np.float64)
    return np.ones_like(base) if power == 0 else base ** power


def reference_gradient(x, power, scale, shift):
    """dy/dx = power scale base^(power - 1); 0 where power or scale is 0."""
    if power == 0 or scale == 0:
        return np.zeros(np.shape(x))
    base = shift + scale * np.asarray(x, np.float64)
    return power * scale * base ** (power - 1)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("power", POWERS)
@pytest.mark.parametrize("scale, shift", SCALE_SHIFTS)
def test_forward(engine, shape, power, scale, shift):
    x = inputs(shape, power, scale, shift, 0)
    layer, bottom, top = set_up(power_layer(power, scale, shift), [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    np.testing.assert_allclose(top[0].data, reference(x, power, scale, shift), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("power", POWERS)
@pytest.mark.parametrize("scale, shift", SCALE_SHIFTS)
def test_backward(engine, power, scale, shift):
    x = inputs((2, 3, 4, 5), power, scale, shift, 6)
    dy = np.random.default_rng(7).normal(size=x.shape).astype(np.float32)
    layer, bottom, top = set_up(power_layer(power, scale, shift), [x])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].cpu_diff, dy * reference_gradient(x, power, scale, shift),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("engine, power, scale, shift", engine_cases(
    [(power, scale, shift) for scale, shift in SCALE_SHIFTS for power in POWERS],
    [(0.37, 0.83, -2.4), (2.0, -0.5, 1.5), (3.0, 0.83, 0.0), (1.0, 0.83, -2.4)], unpack=True),
    indirect=["engine"])
def test_gradient(engine, power, scale, shift):
    x = inputs((2, 3, 4), power, scale, shift, 1)
    layer, bottom, top = set_up(power_layer(power, scale, shift), [x])
    check_gradient(layer, bottom, top, threshold=1e-2)


def test_defaults_are_identity():
    x = np.array([-1.5, 0.0, 2.25], np.float32)
    layer, bottom, top = set_up('name: "pow" type: "Power"', [x])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, x)
    top[0].diff[...] = [1, 2, 3]
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, [1, 2, 3])


@pytest.mark.parametrize("power, scale, shift, value", [
    (0.0, 3.0, 2.0, 1.0),  # power 0: 1 whatever the input
    (0.0, 0.0, 0.0, 1.0),  # 0^0 = 1 too
    (2.0, 0.0, 3.0, 9.0),  # scale 0: shift^power
])
def test_constant_output_and_zero_gradient(power, scale, shift, value):
    layer, bottom, top = set_up(power_layer(power, scale, shift), [np.array([-1.0, 5.0])])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, [value, value])
    top[0].diff[...] = 1
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, [0, 0])


# 0 / 0: the CUDA simulator computes it with numpy scalars, in its own threads
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_zero_base_with_zero_shift_gives_nan_gradient_as_caffe(engine):
    # Caffe evaluates the shift-0 gradient as power * y / x
    layer, bottom, top = set_up(power_layer(0.5, 1.0, 0.0), [np.array([0.0, 4.0])])
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    layer.backward(top, [True], bottom)
    dx = bottom[0].cpu_diff
    assert np.isnan(dx[0]) and dx[1] == np.float32(0.25)


IN_PLACE = [(0.37, 0.83, 2.4), (2.0, 0.83, -2.4), (3.0, 1.0, 0.0), (1.0, 2.0, 1.0)]


@pytest.mark.parametrize("engine, power, scale, shift",
                         engine_cases(IN_PLACE, IN_PLACE + [(0.0, 3.0, 2.0)], unpack=True),
                         indirect=["engine"])
def test_in_place_matches_out_of_place(engine, power, scale, shift):
    rng = np.random.default_rng(2)
    x, dy = inputs((3, 4), power, scale, shift, 3), rng.normal(size=(3, 4))
    assert_in_place_matches([power_layer(power, scale, shift)], x, dy)
    assert_in_place_matches([power_layer(power, scale, shift), SHIFT_DOWN], x, dy)


def test_v1_name():
    assert v1_type_name("POWER") == "Power"


def test_in_place_followed_by_in_place_layer():
    """A later in-place layer overwrites this layer's top data, which backward reads."""
    rng = np.random.default_rng(4)
    x, dy = inputs((3, 4), 0.37, 0.83, -2.4, 5), rng.normal(size=(3, 4))
    assert_in_place_matches([power_layer(0.37, 0.83, -2.4), SHIFT_DOWN], x, dy)
