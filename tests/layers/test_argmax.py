"""ArgMax: indices/values against numpy (inputs with and without ties), top_k, axis, Caffe's
tie order, shapes, errors; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import v1_type_name
from tests.gpu_helpers import assert_tops_on_device, engine_cases
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


def inputs(shape, seed, tied):
    """Values with no two equal, or (``tied``) integers 0..2 with many ties."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 3, shape).astype(np.float32) if tied else no_ties(rng, shape)


@pytest.mark.parametrize("engine, shape, top_k", engine_cases(
    [(shape, top_k) for top_k in (1, 3) for shape in [(3, 10), (2, 3, 4), (2, 3, 2, 2)]],
    [((3, 10), 1), ((2, 3, 2, 2), 3), ((2, 5), 5)], unpack=True), indirect=["engine"])
@pytest.mark.parametrize("out_max_val", [False, True])
@pytest.mark.parametrize("tied", [False, True])
def test_forward_without_axis(engine, shape, top_k, out_max_val, tied):
    x = inputs(shape, 0, tied)
    params = f"top_k: {top_k} out_max_val: {str(out_max_val).lower()}"
    layer, bottom, top = set_up(argmax(params), [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    expected_shape = [shape[0], 2 if out_max_val else 1, top_k] + [1] * (len(shape) - 3)
    assert top[0].shape == tuple(expected_shape)
    rows = x.reshape(shape[0], -1)
    index = ranked(rows, top_k)
    out = top[0].cpu_data.reshape(shape[0], -1, top_k)
    np.testing.assert_array_equal(out[:, 0, :], index)
    if out_max_val:
        np.testing.assert_array_equal(out[:, 1, :], np.take_along_axis(rows, index, axis=1))


@pytest.mark.parametrize("engine, shape, axis, top_k", engine_cases(
    [(shape, axis, top_k) for top_k in (1, 2)
     for shape, axis in [((2, 3, 4), 1), ((2, 3, 4), 2), ((2, 3, 4), 0), ((2, 3, 4), -1),
                         ((4, 5), 1)]],
    [((2, 3, 4), 1, 2), ((2, 3, 4), 0, 1), ((2, 3, 4), -1, 4)], unpack=True),
    indirect=["engine"])
@pytest.mark.parametrize("out_max_val", [False, True])
@pytest.mark.parametrize("tied", [False, True])
def test_forward_with_axis(engine, shape, axis, top_k, out_max_val, tied):
    x = inputs(shape, 1, tied)
    params = f"axis: {axis} top_k: {top_k} out_max_val: {str(out_max_val).lower()}"
    layer, bottom, top = set_up(argmax(params), [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    moved = np.moveaxis(x, axis, -1)
    index = ranked(moved.reshape(-1, moved.shape[-1]), top_k)
    index = index.reshape(moved.shape[:-1] + (top_k,))
    expected = np.take_along_axis(moved, index, axis=-1) if out_max_val else index
    expected = np.moveaxis(expected, -1, axis)
    assert top[0].shape == expected.shape
    np.testing.assert_array_equal(top[0].cpu_data, expected)


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
