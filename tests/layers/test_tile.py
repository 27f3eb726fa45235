"""Tile: forward against np.tile over axes, summed backward, gradients, errors."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import set_up
from tests.numerics import close_to


def tile(params):
    return f'name: "tile" type: "Tile" tile_param {{ {params} }}'


def data(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


CASES = [((2, 3, 4), 1, 3), ((2, 3, 4), 0, 2), ((2, 3, 4), 2, 4), ((2, 3, 4), -1, 2),
         ((5,), 0, 3), ((2, 3), 1, 1), ((2, 1, 3), 1, 9)]


def reps(ndim, axis, tiles):
    r = [1] * ndim
    r[axis] = tiles
    return r


@pytest.mark.parametrize("shape, axis, tiles", CASES)
def test_forward(shape, axis, tiles, engine):
    x = data(shape)
    layer, bottom, top = set_up(tile(f"axis: {axis} tiles: {tiles}"), [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    np.testing.assert_array_equal(top[0].cpu_data, np.tile(x, reps(len(shape), axis, tiles)))


@pytest.mark.parametrize("shape, axis, tiles", CASES)
def test_backward_sums_the_copies(shape, axis, tiles, engine):
    layer, bottom, top = set_up(tile(f"axis: {axis} tiles: {tiles}"), [data(shape)])
    layer.forward(bottom, top)
    dy = data(top[0].shape, seed=1)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    axis = axis % len(shape)
    split = dy.reshape(shape[:axis] + (tiles,) + shape[axis:])
    close_to(bottom[0].cpu_diff, split.sum(axis=axis), rtol=1e-6)


@pytest.mark.parametrize("engine, shape, axis, tiles",
                         engine_cases(CASES, [((2, 3, 2), 1, 3)], unpack=True),
                         indirect=["engine"])
def test_gradient(engine, shape, axis, tiles):
    layer, bottom, top = set_up(tile(f"axis: {axis} tiles: {tiles}"), [data(shape)])
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top)


def test_default_axis_is_one():
    x = data((2, 3))
    layer, bottom, top = set_up(tile("tiles: 2"), [x])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, np.tile(x, (1, 2)))


@pytest.mark.parametrize("params, message", [
    ("axis: 1", "Number of tiles must be specified"),
    ("tiles: 0", "Number of tiles must be positive"),
    ("tiles: -2", "Number of tiles must be positive"),
    ("axis: 3 tiles: 2", "axis 3 out of range"),
])
def test_errors_name_the_layer(params, message):
    with pytest.raises(CaffeError, match=f'"tile".*{message}'):
        set_up(tile(params), [data((2, 3, 4))])
