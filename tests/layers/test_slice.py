"""Slice: forward cuts the bottom along an axis, backward reassembles the gradient."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import set_up

SHAPE = (6, 4, 3, 6)


def slice_layer(params=""):
    return f'name: "sl" type: "Slice" slice_param {{ {params} }}'


def bottom_values(shape=SHAPE, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


CASES = [  # (params, numpy axis, sizes of the tops)
    ("axis: 0", 0, (2, 2, 2)),
    ("axis: 0 slice_point: 1 slice_point: 4", 0, (1, 3, 2)),
    ("", 1, (2, 2)),
    ("slice_point: 3", 1, (3, 1)),
    ("axis: -1", 3, (3, 3)),
    ("axis: -1 slice_point: 1 slice_point: 2 slice_point: 5", 3, (1, 1, 3, 1)),
    ("slice_dim: 0 slice_point: 5", 0, (5, 1)),
    ("slice_dim: 1", 1, (1, 1, 1, 1)),
]
# The GPU cases, on a smaller bottom (the simulator is slow).
GPU_SHAPE = (2, 4, 3, 2)
GPU_CASES = [
    ("axis: 0 slice_point: 1", 0, (1, 1)),
    ("slice_point: 1", 1, (1, 3)),
    ("axis: 2 slice_point: 1 slice_point: 2", 2, (1, 1, 1)),
    ("axis: -1", 3, (1, 1)),
]
ENGINE_CASES = engine_cases([case + (SHAPE,) for case in CASES],
                            [case + (GPU_SHAPE,) for case in GPU_CASES], unpack=True)


@pytest.mark.parametrize("engine, params, axis, sizes, shape", ENGINE_CASES,
                         indirect=["engine"])
def test_forward(engine, params, axis, sizes, shape):
    x = bottom_values(shape)
    layer, bottom, top = set_up(slice_layer(params), [x], len(sizes))
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    expected = np.split(x, np.cumsum(sizes)[:-1], axis=axis)
    for blob, part in zip(top, expected):
        np.testing.assert_array_equal(blob.cpu_data, part)


@pytest.mark.parametrize("engine, params, axis, sizes, shape", ENGINE_CASES,
                         indirect=["engine"])
def test_backward(engine, params, axis, sizes, shape):
    layer, bottom, top = set_up(slice_layer(params), [bottom_values(shape)], len(sizes))
    layer.forward(bottom, top)
    rng = np.random.default_rng(3)
    grads = [rng.normal(size=blob.shape).astype(np.float32) for blob in top]
    for blob, g in zip(top, grads):
        blob.diff[...] = g
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].cpu_diff, np.concatenate(grads, axis=axis))


def test_backward_skipped_without_propagate_down(engine):
    layer, bottom, top = set_up(slice_layer(), [bottom_values()], 2)
    bottom[0].diff[...] = 3
    for blob in top:
        blob.diff[...] = 1
    layer.backward(top, [False], bottom)
    np.testing.assert_array_equal(bottom[0].diff, 3)


@pytest.mark.parametrize("engine, params, num_tops, shape", engine_cases(
    [("axis: 0", 2, (2, 3, 2, 3)), ("slice_point: 1", 2, (2, 3, 2, 3)),
     ("axis: -1 slice_point: 2", 2, (2, 3, 2, 3))],
    [("slice_point: 1", 2, (2, 3, 2))], unpack=True), indirect=["engine"])
def test_gradient(engine, params, num_tops, shape):
    layer, bottom, top = set_up(slice_layer(params), [bottom_values(shape)], num_tops)
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize("engine, shape", engine_cases([SHAPE], [(2, 2, 3)]),
                         indirect=["engine"])
def test_single_top_shares(engine, shape):
    x = bottom_values(shape)
    layer, bottom, top = set_up(slice_layer(), [x], 1)
    layer.forward(bottom, top)
    assert top[0].shares_data_with(bottom[0])
    np.testing.assert_array_equal(top[0].cpu_data, x)
    dy = np.random.default_rng(3).normal(size=shape).astype(np.float32)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].cpu_diff, dy)


def test_single_top_gradient(engine):
    layer, bottom, top = set_up(slice_layer(), [bottom_values((2, 2, 3))], 1)
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize("params, num_tops, message", [
    ("", 3, "evenly divide"),
    ("slice_point: 1", 3, "need exactly 2"),
    ("slice_point: 3 slice_point: 2", 3, "strictly increasing"),
    ("slice_point: 0", 2, "strictly increasing"),
    ("slice_point: 4", 2, "strictly increasing"),
    ("axis: 0", 7, "evenly divide"),
    ("axis: 1 slice_point: 1 slice_point: 2 slice_point: 3 slice_point: 4", 5,
     "into 5 tops"),
    ("axis: 4", 2, "out of range"),
    ("slice_dim: 4", 2, "out of range"),
    ("axis: 1 slice_dim: 1", 2, "not both"),
])
def test_errors(params, num_tops, message):
    with pytest.raises(CaffeError, match=f'"sl".*{message}'):
        set_up(slice_layer(params), [bottom_values()], num_tops)
