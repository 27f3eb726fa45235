"""Exp: forward and backward against numpy for Caffe's base/scale/shift settings (base -1
meaning e, with a shift as well), gradients, bad bases, in-place use; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import v1_type_name
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import (SHIFT_DOWN, assert_in_place_matches, set_up)
from tests.numerics import close_to

SHAPES = [(2, 3, 4, 5), (3, 6)]
# (base, scale, shift): Caffe's own test settings plus e with a shift and a base below 1
PARAMS = [(-1, 1, 0), (2, 1, 0), (2, 1, 1), (2, 3, 0), (2, 3, 1), (-1, 0.5, 1.5),
          (0.5, -2, 0.3), (1, 2, 0.5)]


def exp_layer(base, scale, shift):
    return (f'name: "exp" type: "Exp" exp_param {{ base: {base} scale: {scale} '
            f'shift: {shift} }}')


def reference(x, base, scale, shift):
    z = shift + scale * np.asarray(x, np.float64)
    return np.exp(z) if base == -1 else np.power(float(base), z)


@pytest.mark.parametrize("engine, shape", engine_cases(SHAPES, [(2, 3, 4, 5)]),
                         indirect=["engine"])
@pytest.mark.parametrize("base, scale, shift", PARAMS)
def test_forward_backward(engine, shape, base, scale, shift):
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    dy = np.random.default_rng(5).normal(size=shape).astype(np.float32)
    layer, bottom, top = set_up(exp_layer(base, scale, shift), [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    expected = reference(x, base, scale, shift)
    np.testing.assert_allclose(top[0].cpu_data, expected, rtol=2e-6)
    # dx = dy * y * scale * ln(base)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    log_base = 1.0 if base == -1 else np.log(float(base))
    close_to(bottom[0].cpu_diff, dy * expected * scale * log_base, rtol=2e-6)


def test_defaults_are_natural_exp():
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    layer, bottom, top = set_up('name: "exp" type: "Exp"', [x])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, np.exp(x))


@pytest.mark.parametrize("engine, shape, base, scale, shift", engine_cases(
    [(shape,) + params for params in PARAMS for shape in SHAPES],
    [((2, 3, 4),) + params for params in [(-1, 1, 0), (2, 3, 1), (0.5, -2, 0.3)]],
    unpack=True), indirect=["engine"])
def test_gradient(engine, shape, base, scale, shift):
    x = np.random.default_rng(1).normal(size=shape)
    layer, bottom, top = set_up(exp_layer(base, scale, shift), [x])
    check_gradient(layer, bottom, top, threshold=1e-3)


@pytest.mark.parametrize("base", [0, -2, -0.5, "inf", "nan"])
def test_bad_base(base):
    with pytest.raises(CaffeError, match='"exp".*base'):
        set_up(exp_layer(base, 1, 0), [np.ones(3)])


def test_overflow_gives_inf_as_caffe():
    layer, bottom, top = set_up(exp_layer(-1, 1, 0), [np.array([100.0, 0.0])])
    layer.forward(bottom, top)
    assert np.isinf(top[0].data[0]) and top[0].data[1] == 1


def test_in_place_matches_out_of_place(engine):
    rng = np.random.default_rng(2)
    x, dy = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    assert_in_place_matches([exp_layer(2, 3, 1)], x, dy)
    assert_in_place_matches([exp_layer(2, -3, 1), SHIFT_DOWN], x, dy)


def test_v1_name():
    assert v1_type_name("EXP") == "Exp"


def test_in_place_followed_by_in_place_layer():
    """A later in-place layer overwrites this layer's top data, which backward reads."""
    rng = np.random.default_rng(4)
    x, dy = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    assert_in_place_matches([exp_layer(2, -3, 1), SHIFT_DOWN], x, dy)
