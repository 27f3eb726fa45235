"""Dropout: train-time mask and scale, test-time identity, repeatable masks, gradients. The GPU
path makes its own masks (a counter-based generator), so it is tested by their properties."""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.cuda import launch
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.synced_memory import Head
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import compare_layer_modes, engine_cases
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


@pytest.mark.parametrize("engine, shape, ratio", engine_cases(
    [(shape, ratio) for ratio in (0.3, 0.5) for shape in [(2, 3, 4, 5), (50,)]],
    [((2, 3, 4, 5), ratio) for ratio in (0.3, 0.5)], unpack=True), indirect=["engine"])
def test_gradient(engine, shape, ratio):
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


# --- GPU mode ---------------------------------------------------------------------------------
def gpu_train_forward(ratio, x, seed=7, in_place=False):
    """A TRAIN-phase layer after one forward on the device: (layer, bottom, top, x as float32,
    output)."""
    layer = create_layer(layer_param(dropout(ratio)))
    bottom = blob_of(x)
    top = bottom if in_place else blob_of(np.zeros_like(x))
    layer.setup([bottom], [top])
    backend.set_random_seed(seed)
    layer.forward([bottom], [top])
    assert top.data_memory.head is Head.AT_GPU
    return layer, bottom, top, np.asarray(x, np.float32), top.cpu_data.copy()


def positive_inputs(shape=(50, 80)):
    return np.random.default_rng(0).uniform(1, 2, shape)  # no zeros, so dropped = zero


@pytest.mark.parametrize("ratio", [None, 0.1, 0.5, 0.8, 0.0])
def test_gpu_train_forward(gpu_mode, ratio):
    r = 0.5 if ratio is None else ratio
    layer, _, _, x, y = gpu_train_forward(ratio, positive_inputs())
    kept = y != 0
    np.testing.assert_array_equal(y[kept], x[kept] * layer.scale)
    assert abs(kept.mean() - (1 - r)) < 0.025  # 4000 draws: 3 standard deviations at r = 0.5
    if r == 0:
        assert kept.all()


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("ratio", [0.3, 0.5])
def test_gpu_backward_uses_the_forward_mask(gpu_mode, in_place, ratio):
    layer, bottom, top, x, y = gpu_train_forward(ratio, positive_inputs((30, 40)),
                                                 in_place=in_place)
    dy = np.random.default_rng(1).normal(size=x.shape).astype(np.float32)
    top.diff[...] = dy
    layer.backward([top], [True], [bottom])
    np.testing.assert_array_equal(bottom.cpu_diff, np.where(y != 0, dy * layer.scale, 0))


def test_gpu_mask_repeats_under_the_seed(gpu_mode):
    x = positive_inputs((20, 30))
    layer, bottom, top, _, first = gpu_train_forward(0.5, x, seed=3)
    backend.set_random_seed(3)
    layer.forward([bottom], [top])
    np.testing.assert_array_equal(top.cpu_data, first)
    layer.forward([bottom], [top])
    second = top.cpu_data != 0
    assert abs(np.mean(second == (first != 0)) - 0.5) < 0.05  # a new, independent mask


def test_gpu_mask_does_not_depend_on_the_launch(gpu_mode, monkeypatch):
    x = positive_inputs((20, 30))
    first = gpu_train_forward(0.4, x)[-1]
    monkeypatch.setattr(launch, "THREADS_PER_BLOCK", 64)
    monkeypatch.setattr(launch, "MAX_BLOCKS", 3)
    np.testing.assert_array_equal(gpu_train_forward(0.4, x)[-1], first)


@pytest.mark.parametrize("ratio", [0.2, 0.5])
def test_gpu_test_phase_is_identity(ratio):
    x = np.random.default_rng(1).normal(size=(3, 4, 5))
    dy = np.random.default_rng(2).normal(size=x.shape)
    _, gpu, _, grads = compare_layer_modes(dropout(ratio), [x], top_diffs=[dy],
                                           phase=caffe_pb2.TEST, rtol=0, atol=0)
    np.testing.assert_array_equal(gpu[0], x.astype(np.float32))
    np.testing.assert_array_equal(grads[0], dy.astype(np.float32))


def test_gpu_test_phase_in_place(gpu_mode):
    x = np.random.default_rng(1).normal(size=(3, 4))
    blob = blob_of(x)
    layer = create_layer(layer_param(dropout(0.5), caffe_pb2.TEST))
    layer.setup([blob], [blob])
    layer.forward([blob], [blob])
    np.testing.assert_array_equal(blob.cpu_data, x.astype(np.float32))
    blob.diff[...] = 2
    layer.backward([blob], [True], [blob])
    np.testing.assert_array_equal(blob.cpu_diff, 2)


def test_gpu_without_scale_train(gpu_mode):
    x = positive_inputs((5, 6))
    layer, bottom, top = set_up(dropout(0.25), [x], phase=caffe_pb2.TEST)
    layer.scale_train = False
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].cpu_data, x.astype(np.float32) * 0.75, rtol=1e-6)
    top[0].diff[...] = 2
    layer.backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].cpu_diff, 1.5, rtol=1e-6)
    layer, bottom, top = set_up(dropout(0.25), [x])
    layer.scale_train = False
    layer.forward(bottom, top)
    y, xf = top[0].cpu_data, x.astype(np.float32)
    np.testing.assert_array_equal(y[y != 0], xf[y != 0])
    check_gradient(layer, bottom, top)
