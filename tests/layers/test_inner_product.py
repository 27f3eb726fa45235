"""InnerProduct: forward and backward against numpy, transpose/axis/bias variants, gradients,
errors; on both engines."""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from pycaffe_cli.layers.base import create_layer
from tests.gpu_helpers import assert_tops_on_device
from tests.layer_helpers import blob_of, layer_param, set_up
from tests.numerics import close_to


def inner_product(params, blobs=""):
    return (f'name: "ip" type: "InnerProduct" inner_product_param {{ '
            f'weight_filler {{ type: "gaussian" std: 1 }} '
            f'bias_filler {{ type: "uniform" min: -1 max: 1 }} {params} }} {blobs}')


def reference(x, axis, weight, bias, transpose):
    m = int(np.prod(x.shape[:axis]))
    w = weight.T if transpose else weight
    y = x.reshape(m, -1).astype(np.float64) @ w.T.astype(np.float64)
    if bias is not None:
        y += bias
    return y.reshape(x.shape[:axis] + (w.shape[0],))


CASES = [  # shape, params
    ((2, 3, 4, 5), "num_output: 7"),
    ((2, 3, 4, 5), "num_output: 7 transpose: true"),
    ((2, 3, 4, 5), "num_output: 7 bias_term: false"),
    ((2, 3, 4, 5), "num_output: 6 axis: 2"),
    ((2, 3, 4, 5), "num_output: 6 axis: 2 transpose: true bias_term: false"),
    ((2, 3, 4, 5), "num_output: 3 axis: -1"),
    ((5, 8), "num_output: 4"),
    ((6,), "num_output: 2 axis: 0"),
]


def axis_of(params, ndim):
    for word in params.split("axis: ")[1:]:
        axis = int(word.split()[0])
        return axis + ndim if axis < 0 else axis
    return 1


@pytest.mark.parametrize("shape, params", CASES)
def test_forward(shape, params, engine):
    backend.set_random_seed(0)
    x = np.random.default_rng(1).normal(size=shape)
    layer, bottom, top = set_up(inner_product(params), [x])
    transpose = "transpose: true" in params
    has_bias = "bias_term: false" not in params
    axis = axis_of(params, len(shape))
    k, n = int(np.prod(shape[axis:])), int(params.split()[1])
    assert layer.blobs[0].shape == ((k, n) if transpose else (n, k))
    assert len(layer.blobs) == (2 if has_bias else 1)
    if has_bias:
        assert layer.blobs[1].shape == (n,)
        assert np.count_nonzero(layer.blobs[1].data) == n
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    bias = layer.blobs[1].cpu_data if has_bias else None
    expected = reference(bottom[0].cpu_data, axis, layer.blobs[0].cpu_data, bias, transpose)
    assert top[0].shape == expected.shape
    np.testing.assert_allclose(top[0].cpu_data, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape, params", CASES)
def test_backward(shape, params, engine):
    """dX = dY W, dW = dY^T X (its transpose when stored K x N), db = column sums of dY."""
    backend.set_random_seed(0)
    x = np.random.default_rng(3).normal(size=shape)
    layer, bottom, top = set_up(inner_product(params), [x])
    transpose = "transpose: true" in params
    axis = axis_of(params, len(shape))
    layer.forward(bottom, top)
    dy = np.random.default_rng(4).normal(size=top[0].shape).astype(np.float32)
    top[0].diff[...] = dy
    for blob in layer.blobs:
        blob.diff[...] = 0
    layer.backward(top, [True], bottom)
    stored = layer.blobs[0].cpu_data.astype(np.float64)
    w = stored.T if transpose else stored                     # N x K
    m = int(np.prod(shape[:axis]))
    dy_mat = dy.reshape(m, -1).astype(np.float64)
    x_mat = bottom[0].cpu_data.reshape(m, -1).astype(np.float64)
    np.testing.assert_allclose(bottom[0].cpu_diff, (dy_mat @ w).reshape(shape), rtol=1e-5,
                               atol=1e-5)
    dw = dy_mat.T @ x_mat                                     # N x K
    np.testing.assert_allclose(layer.blobs[0].cpu_diff, dw.T if transpose else dw, rtol=1e-5,
                               atol=1e-5)
    if len(layer.blobs) == 2:
        np.testing.assert_allclose(layer.blobs[1].cpu_diff, dy_mat.sum(axis=0), rtol=1e-5,
                                   atol=1e-5)


@pytest.mark.parametrize("shape, params", CASES)
def test_gradient(shape, params, engine):
    backend.set_random_seed(0)
    x = np.random.default_rng(2).normal(size=shape)
    layer, bottom, top = set_up(inner_product(params), [x])
    check_gradient(layer, bottom, top, mode="exhaustive" if np.prod(shape) < 10 else "random")


def test_param_gradients_accumulate():
    backend.set_random_seed(0)
    layer, bottom, top = set_up(inner_product("num_output: 3"), [np.ones((2, 4))])
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    for blob in layer.blobs:
        blob.diff[...] = 1
    layer.backward(top, [False], bottom)
    np.testing.assert_allclose(layer.blobs[0].diff, 1 + 2)   # dY^T X = 2 per element, + 1
    np.testing.assert_allclose(layer.blobs[1].diff, 1 + 2)
    np.testing.assert_array_equal(bottom[0].diff, 0)          # propagate_down false


def test_backward_skips_frozen_params():
    backend.set_random_seed(0)
    layer, bottom, top = set_up(inner_product("num_output: 3"), [np.ones((2, 4))])
    layer.param_propagate_down = [False, False]
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(layer.blobs[0].diff, 0)
    close_to(bottom[0].diff, layer.blobs[0].data.sum(axis=0)[None].repeat(2, 0), rtol=1e-6)


def test_given_blobs_are_used():
    weights = np.arange(6, dtype=np.float32).reshape(2, 3)
    blobs = ("blobs { shape { dim: 2 dim: 3 } " + " ".join(f"data: {v}" for v in weights.ravel())
             + " } blobs { shape { dim: 2 } data: 10 data: 20 }")
    layer, bottom, top = set_up(inner_product("num_output: 2", blobs), [np.ones((1, 3))])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, [[13, 32]])


def test_given_blobs_of_the_wrong_size():
    blobs = "blobs { shape { dim: 2 dim: 4 } } blobs { shape { dim: 2 } }"
    with pytest.raises(CaffeError, match='"ip".*given blobs'):
        set_up(inner_product("num_output: 2", blobs), [np.ones((1, 3))])


def test_reshape_keeps_k_and_follows_m():
    backend.set_random_seed(0)
    layer, bottom, top = set_up(inner_product("num_output: 4"), [np.ones((2, 3, 5))])
    bottom[0].reshape((6, 15))
    layer.forward(bottom, top)
    assert top[0].shape == (6, 4)


def test_changed_input_size_is_an_error():
    backend.set_random_seed(0)
    layer, bottom, top = set_up(inner_product("num_output: 4"), [np.ones((2, 3, 5))])
    bottom[0].reshape((2, 3, 6))
    with pytest.raises(CaffeError, match='"ip".*Input size incompatible with inner product'):
        layer.forward(bottom, top)


@pytest.mark.parametrize("params, num_bottoms, message", [
    ("num_output: 2", 2, "exactly 1 bottom"),
    ("num_output: 2", 0, "exactly 1 bottom"),
    ("", 1, "num_output"),
    ("num_output: 2 axis: 3", 1, "axis"),
])
def test_setup_errors(params, num_bottoms, message):
    with pytest.raises(CaffeError, match=f'"ip".*{message}'):
        set_up(inner_product(params), [np.ones((2, 3))] * num_bottoms)


def test_unknown_weight_filler():
    text = ('name: "ip" type: "InnerProduct" inner_product_param { num_output: 2 '
            'weight_filler { type: "bogus" } }')
    with pytest.raises(CaffeError, match='"ip".*unknown filler type "bogus"'):
        set_up(text, [np.ones((2, 3))])


def test_top_count_checked():
    layer = create_layer(layer_param(inner_product("num_output: 2")))
    with pytest.raises(CaffeError, match='"ip".*exactly 1 top'):
        layer.setup([blob_of(np.ones((2, 3)))], [])
