"""ArgMax: indices/values against numpy, top_k, axis, Caffe's tie order, shapes, errors."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import v1_type_name
from tests.gpu_helpers import compare_layer_modes
from tests.layer_helpers import no_ties, set_up


def argmax(params=""):
    return f'name: "argmax" type: "ArgMax" argmax_param {{ {params} }}'


def ranked(rows, k):
    """Reference ranking: value descending, ties by larger index first (Caffe's greater<>)."""
    out = []
    for row in rows:
        pairs = sorted(((float(v), j) for j, v in enumerate(row)), reverse=True)
        out.append([j for _, j in pairs[:k]])
    return np.array(out)


@pytest.mark.parametrize("shape", [(3, 10), (2, 3, 4), (2, 3, 2, 2)])
@pytest.mark.parametrize("top_k", [1, 3])
@pytest.mark.parametrize("out_max_val", [False, True])
def test_forward_without_axis(shape, top_k, out_max_val):
    x = no_ties(np.random.default_rng(0), shape)
    params = f"top_k: {top_k} out_max_val: {str(out_max_val).lower()}"
    layer, bottom, top = set_up(argmax(params), [x])
    layer.forward(bottom, top)
    expected_shape = [shape[0], 2 if out_max_val else 1, top_k] + [1] * (len(shape) - 3)
    assert top[0].shape == tuple(expected_shape)
    rows = x.reshape(shape[0], -1)
    index = ranked(rows, top_k)
    out = top[0].data.reshape(shape[0], -1, top_k)
    np.testing.assert_array_equal(out[:, 0, :], index)
    if out_max_val:
        np.testing.assert_array_equal(out[:, 1, :], np.take_along_axis(rows, index, axis=1))


@pytest.mark.parametrize("shape, axis", [((2, 3, 4), 1), ((2, 3, 4), 2), ((2, 3, 4), 0),
                                         ((2, 3, 4), -1), ((4, 5), 1)])
@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("out_max_val", [False, True])
def test_forward_with_axis(shape, axis, top_k, out_max_val):
    x = no_ties(np.random.default_rng(1), shape)
    params = f"axis: {axis} top_k: {top_k} out_max_val: {str(out_max_val).lower()}"
    layer, bottom, top = set_up(argmax(params), [x])
    layer.forward(bottom, top)
    moved = np.moveaxis(x, axis, -1)
    index = ranked(moved.reshape(-1, moved.shape[-1]), top_k).reshape(moved.shape[:-1]
                                                                       + (top_k,))
    expected = np.take_along_axis(moved, index, axis=-1) if out_max_val else index
    expected = np.moveaxis(expected, -1, axis)
    assert top[0].shape == expected.shape
    np.testing.assert_array_equal(top[0].data, expected)


@pytest.mark.parametrize("top_k", [1, 2, 4])
def test_ties_go_to_the_larger_index(top_k, engine):
    x = np.array([[1, 3, 3, 2, 3, 0], [5, 5, 5, 5, 5, 5]], np.float32)
    layer, bottom, top = set_up(argmax(f"top_k: {top_k}"), [x])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data.reshape(2, top_k), ranked(x, top_k))
    assert ranked(x, 4)[0].tolist() == [4, 2, 1, 3]


def test_ties_along_an_axis(engine):
    x = np.array([[[2, 7], [2, 7], [1, 7]]], np.float32)  # (1, 3, 2): ties along axis 1
    layer, bottom, top = set_up(argmax("axis: 1 top_k: 2"), [x])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data[0], [[1, 2], [0, 1]])


def test_no_backward(engine):
    layer, bottom, top = set_up(argmax(), [np.zeros((2, 3))])
    assert not layer.allow_force_backward(0)
    with pytest.raises(CaffeError, match='"argmax"'):
        layer.backward(top, [True], bottom)


@pytest.mark.parametrize("params, shape, message", [
    ("top_k: 0", (2, 3), "top k must not be less than 1"),
    ("top_k: 7", (2, 3, 2), "flattened bottom blob"),
    ("axis: 1 top_k: 4", (2, 3, 5), "dimension of the axis"),
    ("axis: 3", (2, 3, 5), "axis 3 out of range"),
])
def test_errors_name_the_layer(params, shape, message):
    with pytest.raises(CaffeError, match=f'"argmax".*{message}'):
        set_up(argmax(params), [np.zeros(shape)])


def test_v1_name():
    assert v1_type_name("ARGMAX") == "ArgMax"


# --- GPU mode ------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, params", [
    ((3, 10), ""), ((2, 3, 2, 2), "top_k: 3"), ((2, 5), "top_k: 5"),
    ((2, 3, 4), "axis: 1 top_k: 2"), ((2, 3, 4), "axis: 0"), ((2, 3, 4), "axis: -1 top_k: 4"),
])
@pytest.mark.parametrize("out_max_val", [False, True])
@pytest.mark.parametrize("tied", [False, True])
def test_gpu_matches_cpu(shape, params, out_max_val, tied):
    rng = np.random.default_rng(2)
    x = rng.integers(0, 3, shape) if tied else no_ties(rng, shape)
    compare_layer_modes(argmax(f"{params} out_max_val: {str(out_max_val).lower()}"), [x])
