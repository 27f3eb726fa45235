"""Dropout: train-time mask and scale, test-time identity, repeatable masks, gradients."""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.testing import check_gradient
from tests.layer_helpers import blob_of, layer_param, set_up


def dropout(ratio=None):
    params = f"dropout_param {{ dropout_ratio: {ratio} }}" if ratio is not None else ""
    return f'name: "drop" type: "Dropout" {params}'


@pytest.mark.parametrize("ratio", [None, 0.1, 0.5, 0.8, 0.0])
def test_train_forward(ratio):
    r = 0.5 if ratio is None else ratio
    x = np.random.default_rng(0).uniform(1, 2, (40, 50))  # no zeros, so dropped = zero
    layer, bottom, top = set_up(dropout(ratio), [x])
    backend.set_random_seed(7)
    layer.forward(bottom, top)
    kept = top[0].data != 0
    assert abs(kept.mean() - (1 - r)) < 0.03
    scale = np.float32(1 / (1 - np.float32(r)))
    np.testing.assert_allclose(top[0].data[kept], x.astype(np.float32)[kept] * scale,
                               rtol=1e-6)


def test_mask_comes_from_backend_rng():
    x = np.ones((10, 10))
    layer, bottom, top = set_up(dropout(0.5), [x])
    backend.set_random_seed(3)
    layer.forward(bottom, top)
    first = top[0].data.copy()
    backend.set_random_seed(3)
    layer.forward(bottom, top)
    np.testing.assert_array_equal(first, top[0].data)
    layer.forward(bottom, top)
    assert not np.array_equal(first, top[0].data)


@pytest.mark.parametrize("ratio", [0.2, 0.5])
def test_test_phase_is_identity(ratio):
    x = np.random.default_rng(1).normal(size=(3, 4, 5))
    layer, bottom, top = set_up(dropout(ratio), [x], phase=caffe_pb2.TEST)
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, x.astype(np.float32))
    top[0].diff[...] = 2
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, 2)


def test_without_scale_train_test_phase_scales():
    x = np.random.default_rng(1).normal(size=(3, 4))
    layer, bottom, top = set_up(dropout(0.25), [x], phase=caffe_pb2.TEST)
    layer.scale_train = False  # a field of some Caffe forks, not of BVLC's caffe.proto
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, x.astype(np.float32) * 0.75, rtol=1e-6)


def test_without_scale_train_train_phase_only_masks():
    x = np.random.default_rng(1).uniform(1, 2, (5, 6))
    layer, bottom, top = set_up(dropout(0.25), [x])
    layer.scale_train = False
    layer.forward(bottom, top)
    kept = top[0].data != 0
    np.testing.assert_array_equal(top[0].data[kept], x.astype(np.float32)[kept])
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (50,)])
@pytest.mark.parametrize("ratio", [0.3, 0.5])
def test_gradient(shape, ratio):
    x = np.random.default_rng(2).normal(size=shape)
    layer, bottom, top = set_up(dropout(ratio), [x])
    check_gradient(layer, bottom, top)


def test_backward_uses_forward_mask_in_place():
    x = np.random.default_rng(4).uniform(1, 2, (6, 7))
    blob = blob_of(x)
    layer = create_layer(layer_param(dropout(0.5)))
    layer.setup([blob], [blob])
    layer.forward([blob], [blob])
    kept = blob.data != 0
    blob.diff[...] = 1
    layer.backward([blob], [True], [blob])
    np.testing.assert_array_equal(blob.diff, np.where(kept, 2, 0))


@pytest.mark.parametrize("ratio", [1.0, -0.1, 1.5])
def test_bad_ratio(ratio):
    with pytest.raises(CaffeError, match='"drop".*dropout_ratio'):
        set_up(dropout(ratio), [np.ones(3)])


def test_needs_one_bottom():
    with pytest.raises(CaffeError, match='"drop".*exactly 1 bottom'):
        set_up(dropout(), [])
