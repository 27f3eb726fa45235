"""BatchNorm: batch/global statistics against numpy (forward and backward), Caffe's running
sums, gradients, in place, errors; on both engines."""
import sys

import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import blob_of, empty_blobs, layer_param, set_up
from tests.numerics import close_to

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST
SHAPES = [(4, 3), (2, 3, 5), (2, 3, 4, 5), (2, 2, 2, 3, 2)]
# The GPU cases (the simulator is slow): small inputs; (5, 3) and (2, 5, 3) have more channels
# than the conftest's two blocks, so each block reduces several channels.
GPU_SHAPES = [(5, 3), (2, 3, 5), (2, 2, 3, 4)]
# (params, phase, eps) of the layers that normalise with the batch's statistics...
BATCH_MODES = [("", TRAIN, 1e-5), ("eps: 0.25", TRAIN, 0.25),
               ("use_global_stats: false", TEST, 1e-5)]
# ... and of those that use the given stat blobs
GLOBAL_MODES = [("", TEST, 1e-5), ("use_global_stats: true eps: 0.1", TRAIN, 0.1)]


@pytest.fixture
def quick_barriers():
    """The CUDA simulator's syncthreads waits for every thread of the block to get the GIL:
    switching threads more often makes the per-channel reductions ~10x quicker."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    yield
    sys.setswitchinterval(interval)


def batch_norm(params="", extra=""):
    return f'name: "bn" type: "BatchNorm" batch_norm_param {{ {params} }} {extra}'


def data(shape, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=shape) * 2 + 1).astype(np.float32)


def channel_axes(ndim):
    return (0,) + tuple(range(2, ndim))


def per_channel(values, ndim):
    return np.asarray(values, np.float64).reshape((1, -1) + (1,) * (ndim - 2))


def reference(x, mean, var, eps=1e-5):
    x = x.astype(np.float64)
    return (x - per_channel(mean, x.ndim)) / np.sqrt(per_channel(var, x.ndim) + eps)


def batch_reference(x, dy, eps=1e-5):
    """(y, dx) of batch normalisation with the batch's own statistics:
    dx = (dy - mean(dy) - mean(dy y) y) / sqrt(var + eps), means per channel."""
    axes = channel_axes(x.ndim)
    mean = x.mean(axis=axes, dtype=np.float64)
    var = x.var(axis=axes, dtype=np.float64)
    y = reference(x, mean, var, eps)
    dy = dy.astype(np.float64)
    dx = (dy - dy.mean(axis=axes, keepdims=True)
          - (dy * y).mean(axis=axes, keepdims=True) * y) / np.sqrt(per_channel(var, x.ndim)
                                                                   + eps)
    return y, dx


def stat_blobs_text(mean, var, factor):
    def blob(values):
        dims = f"shape {{ dim: {len(values)} }}"
        return "blobs { " + dims + "".join(f" data: {v}" for v in values) + " }"
    return blob(mean) + " " + blob(var) + " " + blob([factor])


def given_stats(channels, factor=2.5):
    """Stat blobs text for ``channels`` channels."""
    return stat_blobs_text(np.linspace(-1, 1, channels), np.linspace(0.5, 2, channels), factor)


@pytest.mark.parametrize("engine, shape, mode, given", engine_cases(
    [(shape, mode, given) for given in (False, True) for mode in BATCH_MODES
     for shape in SHAPES],
    [(shape, mode, True) for mode in BATCH_MODES for shape in GPU_SHAPES]
    + [((2, 5, 3), BATCH_MODES[0], False)], unpack=True), indirect=["engine"])
def test_batch_statistics_forward_backward(engine, quick_barriers, shape, mode, given):
    """Batch statistics (given stat blobs play no part in them), forward and backward."""
    params, phase, eps = mode
    stats = given_stats(shape[1]) if given else ""
    x, dy = data(shape), data(shape, seed=3)
    layer, bottom, top = set_up(batch_norm(params, stats), [x], phase=phase)
    assert not layer.use_global_stats
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    expected_y, expected_dx = batch_reference(x, dy, eps)
    np.testing.assert_allclose(top[0].cpu_data, expected_y, rtol=1e-4, atol=1e-5)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].cpu_diff, expected_dx, rtol=1e-5, atol=1e-5)


def test_eps_is_used():
    x = data((3, 2, 2))
    layer, bottom, top = set_up(batch_norm("eps: 0.5"), [x])
    layer.forward(bottom, top)
    expected = reference(x, x.mean(axis=(0, 2)), x.var(axis=(0, 2)), eps=0.5)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("engine, shape, maf", engine_cases(
    [(shape, maf) for maf in (None, 0.9) for shape in [(4, 3), (2, 3, 4, 5)]],
    [((3, 2, 4), maf) for maf in (None, 0.5)], unpack=True), indirect=["engine"])
def test_train_updates_running_sums_over_two_iterations(engine, quick_barriers, shape, maf):
    params = "" if maf is None else f"moving_average_fraction: {maf}"
    fraction = 0.999 if maf is None else maf
    first, second = data(shape, 1), data(shape, 2)
    layer, bottom, top = set_up(batch_norm(params), [first])
    axes = channel_axes(len(shape))
    m = first.size // shape[1]
    factor, mean_sum, var_sum = 0.0, np.zeros(shape[1]), np.zeros(shape[1])
    for x in (first, second):
        bottom[0].data[...] = x
        layer.forward(bottom, top)
        assert_tops_on_device(layer, top)
        factor = factor * fraction + 1
        mean_sum = fraction * mean_sum + x.mean(axis=axes, dtype=np.float64)
        var_sum = fraction * var_sum + m / (m - 1) * x.var(axis=axes, dtype=np.float64)
        np.testing.assert_allclose(layer.blobs[2].cpu_data, [factor], rtol=1e-6)
        np.testing.assert_allclose(layer.blobs[0].cpu_data, mean_sum, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(layer.blobs[1].cpu_data, var_sum, rtol=1e-5, atol=1e-6)
    # Backward after the second forward works from the second batch's statistics.
    dy = data(shape, 3)
    expected_y, expected_dx = batch_reference(second, dy)
    np.testing.assert_allclose(top[0].cpu_data, expected_y, rtol=1e-4, atol=1e-5)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].cpu_diff, expected_dx, rtol=1e-5, atol=1e-5)
    # The saved sums then normalise like the unbiased running averages they stand for.
    test_layer, test_bottom, test_top = set_up(batch_norm(), [second],
                                               phase=caffe_pb2.TEST)
    for mine, theirs in zip(test_layer.blobs, layer.blobs):
        mine.data[...] = theirs.cpu_data
    test_layer.forward(test_bottom, test_top)
    expected = reference(second, mean_sum / factor, var_sum / factor)
    np.testing.assert_allclose(test_top[0].cpu_data, expected, rtol=1e-4, atol=1e-5)


def test_single_value_per_channel_skips_bias_correction(engine, quick_barriers):
    x = np.array([[1.0, -2.0]])
    layer, bottom, top = set_up(batch_norm("moving_average_fraction: 0.5"), [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    np.testing.assert_allclose(layer.blobs[1].cpu_data, [0, 0])
    np.testing.assert_allclose(layer.blobs[0].cpu_data, [1, -2])
    # one value per channel: x - mean is 0, and so is every gradient
    np.testing.assert_array_equal(top[0].cpu_data, [[0, 0]])
    top[0].diff[...] = x
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].cpu_diff, [[0, 0]])


@pytest.mark.parametrize("engine, shape, factor, mode", engine_cases(
    [(shape, factor, mode) for mode in GLOBAL_MODES for factor in (1.0, 2.5)
     for shape in SHAPES],
    [(shape, 2.5, mode) for mode in GLOBAL_MODES for shape in GPU_SHAPES], unpack=True),
    indirect=["engine"])
def test_given_stat_blobs_forward_backward(engine, quick_barriers, shape, factor, mode):
    params, phase, eps = mode
    channels = shape[1]
    mean = np.linspace(-1, 2, channels)
    var = np.linspace(0.5, 3, channels)
    x, dy = data(shape), data(shape, seed=3)
    layer, bottom, top = set_up(batch_norm(params, stat_blobs_text(mean, var, factor)), [x],
                                phase=phase)
    assert layer.use_global_stats
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    expected = reference(x, mean / factor, var / factor, eps)
    np.testing.assert_allclose(top[0].cpu_data, expected, rtol=1e-5, atol=1e-5)
    # dx = dy / sqrt(var + eps)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].cpu_diff,
                               dy / np.sqrt(per_channel(var / factor, x.ndim) + eps),
                               rtol=1e-5, atol=1e-5)
    # Global statistics are read, never updated.
    close_to(layer.blobs[0].cpu_data, mean, rtol=1e-6)
    np.testing.assert_allclose(layer.blobs[2].cpu_data, [factor])


def test_zero_scale_factor_means_zero_statistics(engine, quick_barriers):
    x, dy = data((2, 3, 2)), data((2, 3, 2), 1)
    layer, bottom, top = set_up(batch_norm("", stat_blobs_text([1, 2, 3], [4, 5, 6], 0)), [x],
                                phase=caffe_pb2.TEST)
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    close_to(top[0].cpu_data, x / np.sqrt(1e-5), rtol=1e-5)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    close_to(bottom[0].cpu_diff, dy / np.sqrt(1e-5), rtol=1e-5)


@pytest.mark.parametrize("params, phase, global_stats", [
    ("use_global_stats: true", caffe_pb2.TRAIN, True),
    ("use_global_stats: false", caffe_pb2.TEST, False),
    ("", caffe_pb2.TRAIN, False),
    ("", caffe_pb2.TEST, True),
])
def test_use_global_stats_default_and_override(params, phase, global_stats):
    layer, _, _ = set_up(batch_norm(params), [data((2, 3))], phase=phase)
    assert layer.use_global_stats == global_stats


def test_stat_blobs_are_masked_from_learning():
    layer, _, _ = set_up(batch_norm(), [data((2, 3, 2, 2))])
    assert [b.shape for b in layer.blobs] == [(3,), (3,), (1,)]
    assert all(np.all(b.data == 0) for b in layer.blobs)
    assert layer.param_propagate_down == [False, False, False]
    assert [spec.lr_mult for spec in layer.param.param] == [0, 0, 0]


def test_given_zero_lr_mult_specs_are_kept():
    text = batch_norm("", "param { lr_mult: 0 decay_mult: 0 } param { lr_mult: 0 }")
    layer, _, _ = set_up(text, [data((2, 3))])
    assert len(layer.param.param) == 3
    assert all(spec.lr_mult == 0 for spec in layer.param.param)


def test_nonzero_lr_mult_is_an_error():
    with pytest.raises(CaffeError, match='"bn".*Cannot configure batch normalization'):
        set_up(batch_norm("", "param { lr_mult: 0 } param { lr_mult: 1 }"), [data((2, 3))])


def test_channel_mismatch_names_the_layer():
    layer, bottom, top = set_up(batch_norm(), [data((2, 3, 4))])
    bottom[0].reshape((2, 4, 4))
    with pytest.raises(CaffeError, match='"bn".*4 channel'):
        layer.forward(bottom, top)


def test_wrong_given_blobs_name_the_layer():
    with pytest.raises(CaffeError, match='"bn"'):
        set_up(batch_norm("", stat_blobs_text([1, 2], [1, 2], 1)), [data((2, 3))])


# The GPU cases: small inputs, with given stat blobs (the simulator is slow).
GPU_GRADIENT = [((3, 2, 2), [0.5, -1], [2, 3])]


@pytest.mark.parametrize("engine, shape, stats, params, phase", engine_cases(
    [(shape, "", "", TRAIN) for shape in SHAPES],
    [(shape, stat_blobs_text(mean, var, 1.5), "", TRAIN) for shape, mean, var in GPU_GRADIENT]
    + [((2, 3, 5), given_stats(3), "eps: 0.25", TRAIN),
       ((2, 5, 3), "", "use_global_stats: false", TEST)], unpack=True),
    indirect=["engine"])
def test_gradient_with_batch_statistics(engine, quick_barriers, shape, stats, params, phase):
    layer, bottom, top = set_up(batch_norm(params, stats), [data(shape)], phase=phase)
    assert not layer.use_global_stats
    check_gradient(layer, bottom, top, check_params=False)


@pytest.mark.parametrize("engine, shape, mean, var, params, phase", engine_cases(
    [(shape, np.linspace(-1, 1, shape[1]), np.linspace(0.5, 2, shape[1]), "", TEST)
     for shape in SHAPES],
    [case + ("", TEST) for case in GPU_GRADIENT]
    + [((2, 2, 3, 4), [0.5, -1], [2, 3], "use_global_stats: true eps: 0.1", TRAIN)],
    unpack=True), indirect=["engine"])
def test_gradient_with_global_statistics(engine, quick_barriers, shape, mean, var, params,
                                         phase):
    stats = stat_blobs_text(mean, var, 1.5)
    layer, bottom, top = set_up(batch_norm(params, stats), [data(shape)], phase=phase)
    assert layer.use_global_stats
    check_gradient(layer, bottom, top, check_params=False)


@pytest.mark.parametrize("phase", [caffe_pb2.TRAIN, caffe_pb2.TEST])
def test_in_place_matches_out_of_place(phase, engine, quick_barriers):
    x = data((3, 2, 4))
    dy = data((3, 2, 4), seed=5)
    stats = stat_blobs_text([0.5, -1], [2, 3], 2)
    layer, bottom, top = set_up(batch_norm("", stats), [x], phase=phase)
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)

    in_place = create_layer(layer_param(batch_norm("", stats), phase))
    blob = blob_of(x)
    in_place.setup([blob], [blob])
    in_place.forward([blob], [blob])
    assert_tops_on_device(in_place, [blob])
    np.testing.assert_allclose(blob.cpu_data, top[0].cpu_data, rtol=1e-6, atol=1e-7)
    blob.diff[...] = dy
    in_place.backward([blob], [True], [blob])
    np.testing.assert_allclose(blob.cpu_diff, bottom[0].cpu_diff, rtol=1e-5, atol=1e-6)


def test_backward_skipped_without_propagate_down(engine, quick_barriers):
    layer, bottom, top = set_up(batch_norm(), [data((2, 3))])
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    bottom[0].diff[...] = 7
    layer.backward(top, [False], bottom)
    assert np.all(bottom[0].cpu_diff == 7)


def test_blob_counts():
    with pytest.raises(CaffeError, match='"bn"'):
        create_layer(layer_param(batch_norm())).setup([blob_of(data((2, 3)))], empty_blobs(2))
