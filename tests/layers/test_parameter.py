"""Parameter: the top is the learnable blob (shared data and diff); on both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.layer_helpers import set_up

PARAMETER = 'name: "p" type: "Parameter" parameter_param { shape { dim: 2 dim: 3 } }'


def test_top_shares_data_and_diff_with_the_blob(engine):
    layer, bottom, top = set_up(PARAMETER, [])
    assert len(layer.blobs) == 1 and layer.blobs[0].shape == (2, 3)
    assert np.all(layer.blobs[0].data == 0)
    assert layer.param_propagate_down == [True]
    layer.forward(bottom, top)
    assert top[0].shape == (2, 3)
    layer.blobs[0].data[...] = np.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(top[0].data, np.arange(6).reshape(2, 3))
    top[0].diff[...] = 5
    layer.backward(top, [], bottom)
    np.testing.assert_array_equal(layer.blobs[0].diff, 5)


def test_forward_and_backward_copy_nothing(engine):
    """The top is the blob's memory: forward writes nothing (on the device neither) and the
    top's diff is the blob's gradient."""
    rng = np.random.default_rng(0)
    values, dy = rng.normal(size=(2, 3)), rng.normal(size=(2, 3)).astype(np.float32)
    layer, bottom, top = set_up(PARAMETER, [])
    if engine == "gpu":
        assert layer.forward_gpu is not None and layer.backward_gpu is not None
    layer.blobs[0].data[...] = values
    layer.blobs[0].diff[...] = 0
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].cpu_data, values.astype(np.float32))
    top[0].diff[...] = dy
    layer.backward(top, [], bottom)
    np.testing.assert_array_equal(layer.blobs[0].cpu_diff, dy)


def test_given_blob_is_exposed(engine):
    text = PARAMETER + " blobs { shape { dim: 2 dim: 3 } data: 1 data: 2 data: 3 data: 4 " \
                       "data: 5 data: 6 }"
    layer, bottom, top = set_up(text, [])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, [[1, 2, 3], [4, 5, 6]])


def test_gradient(engine):
    layer, bottom, top = set_up(PARAMETER, [])
    layer.blobs[0].data[...] = np.random.default_rng(1).normal(size=(2, 3))
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top)


def test_given_blob_of_another_size_names_the_layer():
    text = PARAMETER + " blobs { shape { dim: 4 } }"
    with pytest.raises(CaffeError, match='"p".*parameter_param.shape'):
        set_up(text, [])


def test_takes_no_bottom():
    with pytest.raises(CaffeError, match='"p"'):
        set_up(PARAMETER, [np.zeros(2)])
