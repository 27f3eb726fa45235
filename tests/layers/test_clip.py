"""Clip: forward and backward against numpy, bit for bit, for several ranges (min > max
included) and special inputs (the bounds themselves, NaN), gradients away from the bounds,
inclusive bounds in backward, required params, in-place use; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import SHIFT_DOWN, assert_in_place_matches, set_up

SHAPES = [(2, 3, 4, 5), (7,), (3, 6)]
RANGES = [(-0.5, 0.5), (0.0, 1.0), (-2.0, -1.0), (0.3, 0.3)]
# min > max: every output is min, as in Caffe, and no gradient passes
ALL_RANGES = RANGES + [(1.0, -1.0)]


def clip(lo, hi):
    return f'name: "clip" type: "Clip" clip_param {{ min: {lo} max: {hi} }}'


def inputs(shape, lo, hi, seed=0):
    """Gaussian values kept 0.03 away from both bounds (the finite-difference step is 0.01)."""
    x = np.random.default_rng(seed).normal(scale=1.5, size=shape)
    for bound in (lo, hi):
        near = np.abs(x - bound) < 0.03
        x[near] = bound + 0.05 * np.where(x[near] >= bound, 1, -1)
    return x.astype(np.float32)


def special_inputs(shape, lo, hi, seed):
    """inputs() with the bounds themselves and a NaN (it propagates, as through numpy) first."""
    x = inputs(shape, lo, hi, seed)
    x.flat[:3] = [lo, hi, np.nan]
    return x


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("lo, hi", ALL_RANGES)
def test_forward(shape, lo, hi, engine):
    x = special_inputs(shape, lo, hi, 0)
    layer, bottom, top = set_up(clip(lo, hi), [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    # Caffe's max(min, min(x, max)); equal to numpy's clamp when min <= max
    np.testing.assert_array_equal(top[0].cpu_data,
                                  np.maximum(np.float32(lo), np.minimum(x, np.float32(hi))))
    assert np.isnan(top[0].cpu_data.flat[2])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("lo, hi", ALL_RANGES)
def test_backward(shape, lo, hi, engine):
    """dx = dy where min <= x <= max (bounds included), else 0 (NaN too)."""
    x = special_inputs(shape, lo, hi, 4)
    dy = np.random.default_rng(5).normal(size=shape).astype(np.float32)
    layer, bottom, top = set_up(clip(lo, hi), [x])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    with np.errstate(invalid="ignore"):
        inside = (x >= np.float32(lo)) & (x <= np.float32(hi))
    np.testing.assert_array_equal(bottom[0].cpu_diff, np.where(inside, dy, np.float32(0)))


def test_min_above_max_gives_min_as_caffe(engine):
    layer, bottom, top = set_up(clip(1.0, -1.0), [np.array([-3.0, 0.0, 3.0])])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].cpu_data, [1.0, 1.0, 1.0])


@pytest.mark.parametrize("engine, shape, lo, hi", engine_cases(
    [(shape, lo, hi) for lo, hi in RANGES[:3] for shape in SHAPES],
    [((2, 3, 4), -0.5, 0.5)] + [((2, 3, 4, 5), lo, hi) for lo, hi in RANGES[:3]], unpack=True),
    indirect=["engine"])
def test_gradient(engine, shape, lo, hi):
    layer, bottom, top = set_up(clip(lo, hi), [inputs(shape, lo, hi, 1)])
    # inputs() keeps clear of max; the checker skips anything within reach of min
    check_gradient(layer, bottom, top, threshold=1e-3, kink=lo, kink_range=0.02)


def test_gradient_passes_at_both_bounds(engine):
    layer, bottom, top = set_up(clip(-1, 2), [np.array([-1.5, -1.0, 0.0, 2.0, 2.5])])
    layer.forward(bottom, top)
    top[0].diff[...] = [1, 2, 3, 4, 5]
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].cpu_diff, [0, 2, 3, 4, 0])


def test_in_place_matches_out_of_place(engine):
    rng = np.random.default_rng(2)
    x, dy = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    results = assert_in_place_matches([clip(-0.5, 0.5)], x, dy)
    assert np.any(results[1][1] == 0)  # clipped inputs get no gradient, in place too
    assert_in_place_matches([clip(-0.5, 0.5), SHIFT_DOWN], x, dy)


@pytest.mark.parametrize("text, missing", [
    ('name: "clip" type: "Clip"', "min and max"),
    ('name: "clip" type: "Clip" clip_param { min: 0 }', "max"),
    ('name: "clip" type: "Clip" clip_param { max: 1 }', "min"),
])
def test_min_and_max_are_required(text, missing):
    with pytest.raises(CaffeError, match=f'"clip".*missing {missing}'):
        set_up(text, [np.ones(3)])
