"""DummyData: shapes (new and legacy), fillers per top, constant tops filled only once."""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from tests.layer_helpers import set_up


def dummy(params):
    return f'name: "dummy" type: "DummyData" dummy_data_param {{ {params} }}'


def test_default_filler_is_constant_zero():
    layer, bottom, top = set_up(dummy("shape { dim: 2 dim: 3 }"), [], 2)
    assert [t.shape for t in top] == [(2, 3), (2, 3)]
    for t in top:
        np.testing.assert_array_equal(t.data, 0)


def test_shape_per_top_and_filler_per_top():
    params = ('shape { dim: 2 dim: 3 } shape { dim: 4 } '
              'data_filler { type: "constant" value: 1 } '
              'data_filler { type: "uniform" min: 5 max: 6 }')
    layer, bottom, top = set_up(dummy(params), [], 2)
    assert [t.shape for t in top] == [(2, 3), (4,)]
    np.testing.assert_array_equal(top[0].data, 1)
    layer.forward(bottom, top)
    assert top[1].data.min() >= 5 and top[1].data.max() <= 6


def test_legacy_dims():
    params = "num: 2 channels: 3 channels: 1 height: 4 width: 5"
    layer, bottom, top = set_up(dummy(params), [], 2)
    assert [t.shape for t in top] == [(2, 3, 4, 5), (2, 1, 4, 5)]


def test_constant_top_filled_once_random_top_refilled_each_forward():
    params = ('shape { dim: 3 dim: 4 } '
              'data_filler { type: "constant" value: 2 } data_filler { type: "gaussian" }')
    backend.set_random_seed(5)
    layer, bottom, top = set_up(dummy(params), [], 2)
    np.testing.assert_array_equal(top[0].data, 2)
    np.testing.assert_array_equal(top[1].data, 0)  # not filled until the first forward
    top[0].data[...] = 7  # a constant top is never refilled
    layer.forward(bottom, top)
    first = top[1].data.copy()
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, 7)
    assert not np.array_equal(first, top[1].data)
    assert abs(top[1].data.mean()) < 2


def test_one_random_filler_for_all_tops():
    params = 'shape { dim: 50 } data_filler { type: "uniform" min: -1 max: 1 }'
    backend.set_random_seed(3)
    layer, bottom, top = set_up(dummy(params), [], 2)
    layer.forward(bottom, top)
    assert np.all(np.abs(top[0].data) <= 1) and np.count_nonzero(top[1].data) == 50
    assert not np.array_equal(top[0].data, top[1].data)


@pytest.mark.parametrize("params, num_tops, message", [
    ('shape { dim: 1 } data_filler {} data_filler {}', 3, "0, 1 or equal"),
    ("shape { dim: 1 } shape { dim: 2 }", 3, "'shape' once"),
    ("num: 1 channels: 1 height: 1", 1, "'width' once"),
    ("num: 1 num: 2 channels: 1 height: 1 width: 1", 3, "'num' once"),
    ("shape { dim: 1 } num: 1 channels: 1 height: 1 width: 1", 1, "both shape and legacy"),
    ('shape { dim: 1 } data_filler { type: "fancy" }', 1, "unknown filler"),
])
def test_bad_params(params, num_tops, message):
    with pytest.raises(CaffeError, match=f'"dummy".*{message}'):
        set_up(dummy(params), [], num_tops)


def test_takes_no_bottoms():
    with pytest.raises(CaffeError, match="exactly 0 bottom"):
        set_up(dummy("shape { dim: 1 }"), [np.ones(1)], 1)
