"""Filter: kept items and shapes, scattered backward (to either filtered bottom or both),
selector rules, errors; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device
from tests.layer_helpers import set_up

FILTER = 'name: "filter" type: "Filter"'


def data(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


SELECTORS = [np.array([1, 0, 1, 1, 0]), np.array([0, 0, 0, 0, 0]),
             np.array([[0.5], [0], [0], [-1], [0]]), np.ones((5, 1, 1, 1))]


@pytest.mark.parametrize("selector", SELECTORS)
def test_forward(selector, engine):
    first, second = data((5, 3, 2)), data((5, 4), seed=1)
    layer, bottom, top = set_up(FILTER, [first, second, selector], num_tops=2)
    # Right after setup the tops have the full batch size, as in Caffe.
    assert top[0].shape == (5, 3, 2) and top[1].shape == (5, 4)
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    kept = np.flatnonzero(selector.ravel())
    assert top[0].shape == (len(kept), 3, 2) and top[1].shape == (len(kept), 4)
    np.testing.assert_array_equal(top[0].cpu_data, first[kept])
    np.testing.assert_array_equal(top[1].cpu_data, second[kept])


@pytest.mark.parametrize("down", [[True, False, False], [True, True, False],
                                  [False, True, False]])
@pytest.mark.parametrize("selector", SELECTORS)
def test_backward_scatters_with_zeros(selector, down, engine):
    first, second = data((5, 3, 2)), data((5, 4), seed=1)
    layer, bottom, top = set_up(FILTER, [first, second, selector], num_tops=2)
    layer.forward(bottom, top)
    kept = np.flatnonzero(selector.ravel())
    dys = [data(t.shape, seed=2 + i) for i, t in enumerate(top)]
    for t, dy in zip(top, dys):
        t.diff[...] = dy
    bottom[0].diff[...] = 9
    bottom[1].diff[...] = 9
    layer.backward(top, down, bottom)
    for blob, dy, propagated in zip(bottom, dys, down):
        if propagated:
            expected = np.zeros(blob.shape, np.float32)
            expected[kept] = dy
            np.testing.assert_array_equal(blob.cpu_diff, expected)
        else:
            assert np.all(blob.cpu_diff == 9)


def test_gradient(engine):
    layer, bottom, top = set_up(FILTER, [data((4, 2, 3)), np.array([0, 1, 1, 0])])
    layer.forward(bottom, top)
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top, check_bottom=[0])


def test_no_gradient_to_the_selector():
    layer, bottom, top = set_up(FILTER, [data((3, 2)), data((3, 2)), np.ones(3)], num_tops=2)
    assert layer.allow_force_backward(1) and not layer.allow_force_backward(2)
    layer.forward(bottom, top)
    with pytest.raises(CaffeError, match='"filter".*cannot backpropagate'):
        layer.backward(top, [True, True, True], bottom)


@pytest.mark.parametrize("bottoms, num_tops, message", [
    ([(3, 2), (3, 2)], 1, "Selector blob dimensions must be singletons"),
    ([(3, 2), (4,)], 1, "same 0th dimension"),
    ([(3, 2), (3, 2), (3,)], 1, "one top per filtered bottom"),
])
def test_errors_name_the_layer(bottoms, num_tops, message):
    with pytest.raises(CaffeError, match=f'"filter".*{message}'):
        set_up(FILTER, [np.ones(shape) for shape in bottoms], num_tops=num_tops)
