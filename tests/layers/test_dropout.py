"""Dropout: train-time mask and scale, test-time identity (also in place), repeatable masks,
the backward's use of the forward's mask, gradients; on both engines. The GPU path makes its
own masks (a counter-based generator), so masks are tested by their properties."""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.cuda import launch
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.synced_memory import Head
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import engine_cases
from tests.layer_helpers import blob_of, layer_param, set_up
from tests.numerics import close_to

RATIOS = [None, 0.1, 0.5, 0.8, 0.0]
# The GPU draws its mask on the device, so the CPU's forward cannot stand in for the GPU's.
SAME_MASK = "same"


def dropout(ratio=None):
    params = f"dropout_param {{ dropout_ratio: {ratio} }}" if ratio is not None else ""
    return f'name: "drop" type: "Dropout" {params}'


def positive_inputs(shape=(50, 80), seed=0):
    return np.random.default_rng(seed).uniform(1, 2, shape)  # no zeros, so dropped = zero


def assert_written_on_device(blob):
    """In GPU mode: the forward wrote ``blob`` on the device, not through the CPU fallback."""
    if backend.mode() is backend.Mode.GPU:
        assert blob.data_memory.head is Head.AT_GPU


def train_forward(ratio, x, seed=7, in_place=False):
    """A TRAIN-phase layer after one forward in the current mode: (layer, bottom, top, x as
    float32, output)."""
    layer = create_layer(layer_param(dropout(ratio)))
    bottom = blob_of(x)
    top = bottom if in_place else blob_of(np.zeros_like(x))
    layer.setup([bottom], [top])
    backend.set_random_seed(seed)
    layer.forward([bottom], [top])
    assert_written_on_device(top)
    return layer, bottom, top, np.asarray(x, np.float32), top.cpu_data.copy()


# (shape, tolerance on the kept fraction): 2000 and 4000 draws
@pytest.mark.parametrize("engine, ratio, shape, tolerance", engine_cases(
    [(ratio, (40, 50), 0.03) for ratio in RATIOS],
    [(ratio, (50, 80), 0.025) for ratio in RATIOS], unpack=True), indirect=["engine"])
def test_train_forward(engine, ratio, shape, tolerance):
    r = 0.5 if ratio is None else ratio
    layer, _, _, x, y = train_forward(ratio, positive_inputs(shape))
    kept = y != 0
    assert abs(kept.mean() - (1 - r)) < tolerance
    scale = np.float32(1 / (1 - np.float32(r)))
    np.testing.assert_allclose(y[kept], x[kept] * scale, rtol=1e-6)
    np.testing.assert_array_equal(y[kept], x[kept] * layer.scale)
    if r == 0:
        assert kept.all()


@pytest.mark.parametrize("engine, shape", engine_cases([(10, 10), (20, 30)], [(20, 30)]),
                         indirect=["engine"])
def test_mask_repeats_under_the_seed(engine, shape):
    """The mask comes from backend.rng(): the same seed, the same mask; the next forward, a
    new, independent one."""
    x = positive_inputs(shape)
    layer, bottom, top, _, first = train_forward(0.5, x, seed=3)
    backend.set_random_seed(3)
    layer.forward([bottom], [top])
    np.testing.assert_array_equal(top.cpu_data, first)
    layer.forward([bottom], [top])
    second = top.cpu_data != 0
    assert not np.array_equal(top.cpu_data, first)
    if x.size >= 600:  # enough draws for the agreement to sit within 2.5 standard deviations
        assert abs(np.mean(second == (first != 0)) - 0.5) < 0.05


def test_gpu_mask_does_not_depend_on_the_launch(gpu_mode, monkeypatch):
    x = positive_inputs((20, 30))
    first = train_forward(0.4, x)[-1]
    monkeypatch.setattr(launch, "THREADS_PER_BLOCK", 64)
    monkeypatch.setattr(launch, "MAX_BLOCKS", 3)
    np.testing.assert_array_equal(train_forward(0.4, x)[-1], first)


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("ratio", [0.2, 0.5])
def test_test_phase_is_identity(engine, ratio, in_place):
    x = np.random.default_rng(1).normal(size=(3, 4, 5))
    layer = create_layer(layer_param(dropout(ratio), caffe_pb2.TEST))
    bottom = blob_of(x)
    top = bottom if in_place else blob_of(np.zeros_like(x))
    layer.setup([bottom], [top])
    layer.forward([bottom], [top])
    if not in_place:
        assert_written_on_device(top)
    np.testing.assert_array_equal(top.cpu_data, x.astype(np.float32))
    for dy in (np.random.default_rng(2).normal(size=x.shape), np.full(x.shape, 2.0)):
        top.diff[...] = dy
        layer.backward([top], [True], [bottom])
        np.testing.assert_array_equal(bottom.cpu_diff, dy.astype(np.float32))


def test_without_scale_train_test_phase_scales(engine):
    x = np.random.default_rng(1).normal(size=(3, 4))
    layer, bottom, top = set_up(dropout(0.25), [x], phase=caffe_pb2.TEST)
    layer.scale_train = False  # a field of some Caffe forks, not of BVLC's caffe.proto
    layer.forward(bottom, top)
    assert_written_on_device(top[0])
    close_to(top[0].cpu_data, x.astype(np.float32) * 0.75, rtol=1e-6)
    top[0].diff[...] = 2
    layer.backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].cpu_diff, 1.5, rtol=1e-6)


def test_without_scale_train_train_phase_only_masks(engine):
    x = np.random.default_rng(1).uniform(1, 2, (5, 6))
    layer, bottom, top = set_up(dropout(0.25), [x])
    layer.scale_train = False
    layer.forward(bottom, top)
    assert_written_on_device(top[0])
    y = top[0].cpu_data
    kept = y != 0
    np.testing.assert_array_equal(y[kept], x.astype(np.float32)[kept])
    check_gradient(layer, bottom, top, numeric_engine=SAME_MASK)


@pytest.mark.parametrize("engine, shape, ratio", engine_cases(
    [(shape, ratio) for ratio in (0.3, 0.5) for shape in [(2, 3, 4, 5), (50,)]],
    [((2, 3, 4, 5), ratio) for ratio in (0.3, 0.5)], unpack=True), indirect=["engine"])
def test_gradient(engine, shape, ratio):
    x = np.random.default_rng(2).normal(size=shape)
    layer, bottom, top = set_up(dropout(ratio), [x])
    check_gradient(layer, bottom, top, numeric_engine=SAME_MASK)


@pytest.mark.parametrize("engine, shape, in_place, ratio", engine_cases(
    [((6, 7), True, 0.5)]
    + [((30, 40), in_place, ratio) for ratio in (0.3, 0.5) for in_place in (False, True)],
    [((30, 40), in_place, ratio) for ratio in (0.3, 0.5) for in_place in (False, True)],
    unpack=True), indirect=["engine"])
def test_backward_uses_the_forward_mask(engine, shape, in_place, ratio):
    layer, bottom, top, x, y = train_forward(ratio, positive_inputs(shape, seed=4),
                                             in_place=in_place)
    kept = y != 0
    scale = np.float32(1 / (1 - np.float32(ratio)))
    for dy in (np.ones(x.shape, np.float32),
               np.random.default_rng(1).normal(size=x.shape).astype(np.float32)):
        top.diff[...] = dy
        layer.backward([top], [True], [bottom])
        np.testing.assert_array_equal(bottom.cpu_diff, np.where(kept, dy * layer.scale, 0))
        close_to(bottom.cpu_diff, np.where(kept, dy * scale, 0), rtol=1e-6)


@pytest.mark.parametrize("ratio", [1.0, -0.1, 1.5])
def test_bad_ratio(ratio):
    with pytest.raises(CaffeError, match='"drop".*dropout_ratio'):
        set_up(dropout(ratio), [np.ones(3)])


def test_needs_one_bottom():
    with pytest.raises(CaffeError, match='"drop".*exactly 1 bottom'):
        set_up(dropout(), [])
