"""Split: tops alias the bottom's data; the bottom's gradient is the sum of the tops'."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import engine_cases
from tests.layer_helpers import blob_of, layer_param, set_up

SPLIT = 'name: "split" type: "Split"'


@pytest.mark.parametrize("num_tops", [1, 2, 3])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (7,), (3, 4)])
def test_forward_shares_bottom_data(num_tops, shape, engine):
    x = np.random.default_rng(0).normal(size=shape)
    layer, bottom, top = set_up(SPLIT, [x], num_tops)
    layer.forward(bottom, top)
    for blob in top:
        assert blob.shape == shape
        assert blob.shares_data_with(bottom[0])
        np.testing.assert_array_equal(blob.cpu_data, x.astype(np.float32))


@pytest.mark.parametrize("num_tops", [1, 2, 3, 4])
def test_backward_sums_top_diffs(num_tops, engine):
    rng = np.random.default_rng(1)
    layer, bottom, top = set_up(SPLIT, [rng.normal(size=(2, 3, 4))], num_tops)
    layer.forward(bottom, top)
    diffs = [rng.normal(size=(2, 3, 4)).astype(np.float32) for _ in top]
    for blob, d in zip(top, diffs):
        blob.diff[...] = d
    layer.backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].cpu_diff, np.sum(diffs, axis=0), rtol=1e-6, atol=1e-6)


def test_backward_skipped_without_propagate_down(engine):
    layer, bottom, top = set_up(SPLIT, [np.ones((2, 2))], 2)
    bottom[0].diff[...] = 7
    top[0].diff[...] = 1
    top[1].diff[...] = 2
    layer.backward(top, [False], bottom)
    np.testing.assert_array_equal(bottom[0].diff, 7)


@pytest.mark.parametrize("engine, num_tops, shape", engine_cases(
    [(1, (2, 3, 2)), (3, (2, 3, 2))], [(3, (2, 3))], unpack=True), indirect=["engine"])
def test_gradient(engine, num_tops, shape):
    x = np.random.default_rng(2).normal(size=shape)
    layer, bottom, top = set_up(SPLIT, [x], num_tops)
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top)


def test_in_place_is_refused():
    layer = create_layer(layer_param(SPLIT))
    blob = blob_of(np.ones(3))
    with pytest.raises(CaffeError, match='"split".*in-place'):
        layer.setup([blob], [blob])


def test_needs_a_top():
    with pytest.raises(CaffeError, match='"split"'):
        set_up(SPLIT, [np.ones(3)], 0)
