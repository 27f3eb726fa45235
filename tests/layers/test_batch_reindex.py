"""BatchReindex: gather against numpy, accumulating backward, gradients, fractional indices
truncated, index errors; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import set_up

REINDEX = 'name: "reindex" type: "BatchReindex"'


def data(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


CASES = [((5, 2, 3), [4, 0, 4, 2, 2, 2]), ((3,), [2, 1]), ((4, 3), [1, 1, 1, 1, 1]),
         ((2, 2), []), ((3, 2), [2, 1, 0, 1, 2, 2, 0, 1, 1])]


@pytest.mark.parametrize("shape, index", CASES)
def test_forward(shape, index, engine):
    x = data(shape)
    layer, bottom, top = set_up(REINDEX, [x, np.array(index, np.float32)])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    assert top[0].shape == (len(index),) + shape[1:]
    np.testing.assert_array_equal(top[0].cpu_data, x[np.array(index, int)])


@pytest.mark.parametrize("shape, index", CASES)
def test_backward_accumulates(shape, index, engine):
    layer, bottom, top = set_up(REINDEX, [data(shape), np.array(index, np.float32)])
    layer.forward(bottom, top)
    dy = data(top[0].shape, seed=1)
    top[0].diff[...] = dy
    bottom[0].diff[...] = 9
    layer.backward(top, [True, False], bottom)
    expected = np.zeros(shape, np.float64)
    for k, i in enumerate(index):
        expected[i] += dy[k]
    np.testing.assert_allclose(bottom[0].cpu_diff, expected, rtol=1e-6, atol=1e-7)


def test_fractional_indices_are_truncated(engine):
    x, index = data((3, 2)), np.array([2.7, 0.2, 1.9, 2.1], np.float32)
    layer, bottom, top = set_up(REINDEX, [x, index])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    np.testing.assert_array_equal(top[0].cpu_data, x[[2, 0, 1, 2]])
    dy = data((4, 2), seed=1)
    top[0].diff[...] = dy
    layer.backward(top, [True, False], bottom)
    np.testing.assert_allclose(bottom[0].cpu_diff, [dy[1], dy[2], dy[0] + dy[3]], rtol=1e-6,
                               atol=1e-7)


@pytest.mark.parametrize("shape, index", [((4, 3), [3, 0, 3, 1, 3])]
                         + [case for case in CASES if case[1]])
def test_gradient(engine, shape, index):
    layer, bottom, top = set_up(REINDEX, [data(shape), np.array(index)])
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top, check_bottom=[0])


def test_no_gradient_to_the_indices():
    layer, bottom, top = set_up(REINDEX, [data((3, 2)), np.array([0, 2])])
    assert layer.allow_force_backward(0) and not layer.allow_force_backward(1)
    layer.forward(bottom, top)
    with pytest.raises(CaffeError, match='"reindex".*Cannot backprop to index'):
        layer.backward(top, [True, True], bottom)


@pytest.mark.parametrize("engine, index, message", engine_cases(
    [([0, -1], "negative"), ([0, 3], "greater than batch size")],
    [([0, 3], "greater than batch size")], unpack=True), indirect=["engine"])
def test_bad_indices_name_the_layer(engine, index, message):
    layer, bottom, top = set_up(REINDEX, [data((3, 2)), np.array(index)])
    with pytest.raises(CaffeError, match=f'"reindex".*{message}'):
        layer.forward(bottom, top)


def test_index_blob_must_be_one_axis():
    with pytest.raises(CaffeError, match='"reindex".*exactly 1 axis'):
        set_up(REINDEX, [data((3, 2)), np.zeros((2, 1))])
