"""Concat: forward joins bottoms along an axis, backward hands each bottom its slice; a single
bottom shares; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import set_up


def concat(params=""):
    return f'name: "cat" type: "Concat" concat_param {{ {params} }}'


def inputs(axis, sizes, base=(2, 3, 4, 5), seed=0):
    rng = np.random.default_rng(seed)
    shapes = []
    for n in sizes:
        shape = list(base)
        shape[axis] = n
        shapes.append(tuple(shape))
    return [rng.normal(size=s).astype(np.float32) for s in shapes]


CASES = [  # (params, numpy axis, sizes along it)
    ("axis: 0", 0, (2, 1, 3)),
    ("", 1, (3, 2)),
    ("axis: 1", 1, (1, 4, 2)),
    ("axis: -1", 3, (5, 2)),
    ("axis: 2", 2, (4, 4)),
    ("concat_dim: 0", 0, (1, 2)),
    ("concat_dim: 1", 1, (3, 3)),
]


@pytest.mark.parametrize("params, axis, sizes", CASES)
def test_forward(params, axis, sizes, engine):
    xs = inputs(axis, sizes)
    layer, bottom, top = set_up(concat(params), xs)
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    np.testing.assert_array_equal(top[0].cpu_data, np.concatenate(xs, axis=axis))


@pytest.mark.parametrize("params, axis, sizes", CASES)
def test_backward(params, axis, sizes, engine):
    xs = inputs(axis, sizes)
    layer, bottom, top = set_up(concat(params), xs)
    layer.forward(bottom, top)
    grad = np.random.default_rng(5).normal(size=top[0].shape).astype(np.float32)
    top[0].diff[...] = grad
    for blob in bottom:
        blob.diff[...] = -7
    down = [i != 1 for i in range(len(bottom))]
    layer.backward(top, down, bottom)
    parts = np.split(grad, np.cumsum(sizes)[:-1], axis=axis)
    for blob, part, d in zip(bottom, parts, down):
        np.testing.assert_array_equal(blob.cpu_diff, part if d else -7)


@pytest.mark.parametrize("engine, params, axis, sizes, base", engine_cases(
    [case + ((2, 3, 2, 3),) for case in (CASES[0], CASES[1], CASES[3])],
    [("axis: 1", 1, (2, 1), (2, 3, 2))]
    + [case + ((2, 3, 2, 3),) for case in (CASES[0], CASES[1], CASES[3], CASES[4])],
    unpack=True), indirect=["engine"])
def test_gradient(engine, params, axis, sizes, base):
    xs = inputs(axis, sizes, base=base)
    layer, bottom, top = set_up(concat(params), xs)
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top)


def test_single_bottom_shares(engine):
    x = inputs(1, (3,))[0]
    layer, bottom, top = set_up(concat(), [x])
    layer.forward(bottom, top)
    assert top[0].shares_data_with(bottom[0])
    np.testing.assert_array_equal(top[0].cpu_data, x)
    dy = np.random.default_rng(6).normal(size=x.shape).astype(np.float32)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].cpu_diff, dy)


def test_single_bottom_gradient(engine):
    layer, bottom, top = set_up(concat(), inputs(1, (2,), base=(2, 2, 3)))
    check_gradient(layer, bottom, top)


def test_reshape_follows_bottoms():
    xs = inputs(1, (3, 2))
    layer, bottom, top = set_up(concat(), xs)
    bottom[0].reshape((4, 3, 4, 5))
    bottom[1].reshape((4, 2, 4, 5))
    layer.forward(bottom, top)
    assert top[0].shape == (4, 5, 4, 5)


def test_mismatched_shapes_name_layer_and_shapes():
    xs = [np.ones((2, 3, 4)), np.ones((2, 3, 5))]
    with pytest.raises(CaffeError, match=r'"cat".*2 3 4 \(24\).*2 3 5 \(30\)'):
        set_up(concat(), xs)


def test_mismatched_num_axes():
    with pytest.raises(CaffeError, match='"cat"'):
        set_up(concat(), [np.ones((2, 3, 4)), np.ones((2, 3))])


@pytest.mark.parametrize("params", ["axis: 3", "axis: -4", "concat_dim: 3",
                                    "axis: 1 concat_dim: 1"])
def test_bad_axis(params):
    with pytest.raises(CaffeError, match='"cat"'):
        set_up(concat(params), [np.ones((2, 3, 4)), np.ones((2, 3, 4))])
