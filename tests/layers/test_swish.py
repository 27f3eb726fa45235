"""Swish: forward against numpy for several betas, gradients, Caffe's backward formula,
in-place use."""
import numpy as np
import pytest

from pycaffe_cli.blob import Blob
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.testing import check_gradient
from tests.layer_helpers import blob_of, layer_param, set_up

SHAPES = [(2, 3, 4, 5), (7,), (3, 6)]
BETAS = [1.0, 2.0, 0.5]


def swish(beta=None):
    param = f" swish_param {{ beta: {beta} }}" if beta is not None else ""
    return f'name: "swish" type: "Swish"{param}'


def reference(x, beta):
    x = np.asarray(x, np.float64)
    return x / (1.0 + np.exp(-beta * x))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("beta", BETAS)
def test_forward(shape, beta):
    x = np.random.default_rng(0).normal(scale=2.0, size=shape).astype(np.float32)
    layer, bottom, top = set_up(swish(beta), [x])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, reference(x, beta), rtol=1e-6, atol=1e-7)


def test_default_beta_is_one():
    x = np.array([-2.0, 0.0, 3.0], np.float32)
    layer, bottom, top = set_up(swish(), [x])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, reference(x, 1.0), rtol=1e-6)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("beta", BETAS)
def test_gradient(shape, beta):
    x = np.random.default_rng(1).normal(size=shape)
    layer, bottom, top = set_up(swish(beta), [x])
    check_gradient(layer, bottom, top, threshold=1e-3)


@pytest.mark.parametrize("beta", BETAS)
def test_backward_against_the_derivative(beta):
    x = np.linspace(-6, 6, 25)
    layer, bottom, top = set_up(swish(beta), [x])
    layer.forward(bottom, top)
    top[0].diff[...] = 1.5
    layer.backward(top, [True], bottom)
    s = 1.0 / (1.0 + np.exp(-beta * x))
    np.testing.assert_allclose(bottom[0].diff, 1.5 * (s + beta * x * s * (1 - s)), rtol=1e-5,
                               atol=1e-7)


def test_in_place_matches_out_of_place():
    rng = np.random.default_rng(2)
    x, dy = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    results = []
    for in_place in (False, True):
        layer = create_layer(layer_param(swish(2.0)))
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
    texts = [swish(2.0), SHIFT_DOWN]
    y_new, dx_new = run_chain(texts, x, dy, in_place=False)
    y_same, dx_same = run_chain(texts, x, dy, in_place=True)
    np.testing.assert_array_equal(y_same, y_new)
    np.testing.assert_array_equal(dx_same, dx_new)
