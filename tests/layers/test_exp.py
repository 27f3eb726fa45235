"""Exp: forward against numpy for Caffe's base/scale/shift settings (base -1 meaning e, with a
shift as well), gradients, bad bases, in-place use."""
import numpy as np
import pytest

from pycaffe_cli.blob import Blob
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer, v1_type_name
from pycaffe_cli.testing import check_gradient
from tests.layer_helpers import blob_of, layer_param, set_up

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


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("base, scale, shift", PARAMS)
def test_forward(shape, base, scale, shift):
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    layer, bottom, top = set_up(exp_layer(base, scale, shift), [x])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, reference(x, base, scale, shift), rtol=2e-6)


def test_defaults_are_natural_exp():
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    layer, bottom, top = set_up('name: "exp" type: "Exp"', [x])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, np.exp(x))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("base, scale, shift", PARAMS)
def test_gradient(shape, base, scale, shift):
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


def test_in_place_matches_out_of_place():
    rng = np.random.default_rng(2)
    x, dy = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    results = []
    for in_place in (False, True):
        layer = create_layer(layer_param(exp_layer(2, 3, 1)))
        bottom = blob_of(x)
        top = bottom if in_place else Blob()
        layer.setup([bottom], [top])
        layer.forward([bottom], [top])
        y = top.data.copy()
        top.diff[...] = dy
        layer.backward([top], [True], [bottom])
        results.append((y, bottom.diff.copy()))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])


def test_v1_name():
    assert v1_type_name("EXP") == "Exp"


# a second in-place layer that changes every value: y = 2 x - 1
SHIFT_DOWN = 'name: "affine" type: "Power" power_param { scale: 2 shift: -1 }'


def run_chain(texts, x, dy, in_place):
    """Forward then backward through layers applied one after another, either all in place on
    one blob or each into a new blob; returns the output and the gradient reaching x."""
    layers = [create_layer(layer_param(text)) for text in texts]
    blobs = [blob_of(x)]
    for layer in layers:
        top = blobs[-1] if in_place else Blob()
        layer.setup([blobs[-1]], [top])
        blobs.append(top)
    for layer, bottom, top in zip(layers, blobs, blobs[1:]):
        layer.forward([bottom], [top])
    y = blobs[-1].data.copy()
    blobs[-1].diff[...] = dy
    for layer, bottom, top in reversed(list(zip(layers, blobs, blobs[1:]))):
        layer.backward([top], [True], [bottom])
    return y, blobs[0].diff.copy()


def test_in_place_followed_by_in_place_layer():
    """A later in-place layer overwrites this layer's top data, which backward reads."""
    rng = np.random.default_rng(4)
    x, dy = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    texts = [exp_layer(2, -3, 1), SHIFT_DOWN]
    y_new, dx_new = run_chain(texts, x, dy, in_place=False)
    y_same, dx_same = run_chain(texts, x, dy, in_place=True)
    np.testing.assert_array_equal(y_same, y_new)
    np.testing.assert_array_equal(dx_same, dx_new)
