"""Log: forward and backward against numpy for Caffe's base/scale/shift settings on positive
inputs, gradients, bad bases, unchecked non-positive arguments, in-place use; on both
engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import SHIFT_DOWN, assert_in_place_matches, set_up

SHAPES = [(2, 3, 4, 5), (3, 6)]
# (base, scale, shift): Caffe's own test settings plus a base below 1 and a negative scale
PARAMS = [(-1, 1, 0), (2, 1, 0), (2, 1, 1), (2, 3, 0), (2, 3, 1), (0.5, 0.7, 0.2),
          (10, -1, 20)]


def log_layer(base, scale, shift):
    return (f'name: "log" type: "Log" log_param {{ base: {base} scale: {scale} '
            f'shift: {shift} }}')


def inputs(shape, seed):
    """exp of Gaussian values, as Caffe's test: positive, from about 0.05 to 20."""
    return np.exp(np.random.default_rng(seed).normal(size=shape)).astype(np.float32)


def reference(x, base, scale, shift):
    z = np.log(shift + scale * np.asarray(x, np.float64))
    return z if base == -1 else z / np.log(base)


@pytest.mark.parametrize("engine, shape, seed", engine_cases(
    [(shape, 0) for shape in SHAPES], [((2, 3, 4, 5), 5)], unpack=True), indirect=["engine"])
@pytest.mark.parametrize("base, scale, shift", PARAMS)
def test_forward_backward(engine, shape, seed, base, scale, shift):
    x = inputs(shape, seed)
    dy = np.random.default_rng(6).normal(size=shape).astype(np.float32)
    layer, bottom, top = set_up(log_layer(base, scale, shift), [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    np.testing.assert_allclose(top[0].cpu_data, reference(x, base, scale, shift), rtol=1e-5,
                               atol=1e-6)
    # dx = dy * scale / (ln(base) (shift + scale x))
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    log_base = 1.0 if base == -1 else np.log(float(base))
    expected = dy * scale / (log_base * (shift + scale * x.astype(np.float64)))
    np.testing.assert_allclose(bottom[0].cpu_diff, expected, rtol=1e-5, atol=1e-6)


def test_defaults_are_natural_log():
    x = np.array([0.5, 1.0, 3.0], np.float32)
    layer, bottom, top = set_up('name: "log" type: "Log"', [x])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, np.log(x))


@pytest.mark.parametrize("engine, shape, base, scale, shift", engine_cases(
    [(shape,) + params for params in PARAMS for shape in SHAPES],
    [((2, 3, 4),) + params for params in [(-1, 1, 0), (2, 3, 1), (10, -1, 20)]], unpack=True),
    indirect=["engine"])
def test_gradient(engine, shape, base, scale, shift):
    # values near 0 make the finite difference of log inaccurate; Caffe's test uses 1e-2 too
    x = np.maximum(inputs(shape, 1), 0.2)
    layer, bottom, top = set_up(log_layer(base, scale, shift), [x])
    check_gradient(layer, bottom, top, threshold=1e-2)


def test_non_positive_arguments_are_not_checked():
    layer, bottom, top = set_up(log_layer(-1, 1, 0), [np.array([-1.0, 0.0, 1.0])])
    layer.forward(bottom, top)
    y = top[0].data
    assert np.isnan(y[0]) and y[1] == -np.inf and y[2] == 0


@pytest.mark.parametrize("base", [0, -2, -0.5, 1, "inf"])
def test_bad_base(base):
    with pytest.raises(CaffeError, match='"log".*base'):
        set_up(log_layer(base, 1, 0), [np.ones(3)])


def test_in_place_matches_out_of_place(engine):
    rng = np.random.default_rng(2)
    x, dy = inputs((3, 4), 3), rng.normal(size=(3, 4))
    assert_in_place_matches([log_layer(2, 3, 1)], x, dy)
    assert_in_place_matches([log_layer(2, 3, 1), SHIFT_DOWN], x, dy)
