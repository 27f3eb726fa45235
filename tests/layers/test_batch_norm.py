"""BatchNorm: batch/global statistics against numpy, Caffe's running sums, gradients, errors."""
import sys

import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import engine_cases
from tests.layer_helpers import blob_of, empty_blobs, layer_param, set_up

SHAPES = [(4, 3), (2, 3, 5), (2, 3, 4, 5), (2, 2, 2, 3, 2)]


def batch_norm(params="", extra=""):
    return f'name: "bn" type: "BatchNorm" batch_norm_param {{ {params} }} {extra}'


def data(shape, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=shape) * 2 + 1).astype(np.float32)


def channel_axes(ndim):
    return (0,) + tuple(range(2, ndim))


def reference(x, mean, var, eps=1e-5):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    x = x.astype(np.float64)
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)


@pytest.mark.parametrize("shape", SHAPES)
def test_train_forward_uses_batch_statistics(shape):
    x = data(shape)
    layer, bottom, top = set_up(batch_norm(), [x])
    assert not layer.use_global_stats
    layer.forward(bottom, top)
    axes = channel_axes(x.ndim)
    expected = reference(x, x.mean(axis=axes, dtype=np.float64),
                         x.var(axis=axes, dtype=np.float64))
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-4, atol=1e-5)


def test_eps_is_used():
    x = data((3, 2, 2))
    layer, bottom, top = set_up(batch_norm("eps: 0.5"), [x])
    layer.forward(bottom, top)
    expected = reference(x, x.mean(axis=(0, 2)), x.var(axis=(0, 2)), eps=0.5)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4, 5)])
@pytest.mark.parametrize("maf", [None, 0.9])
def test_train_updates_running_sums_over_two_iterations(shape, maf):
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
        factor = factor * fraction + 1
        mean_sum = fraction * mean_sum + x.mean(axis=axes, dtype=np.float64)
        var_sum = fraction * var_sum + m / (m - 1) * x.var(axis=axes, dtype=np.float64)
        np.testing.assert_allclose(layer.blobs[2].data, [factor], rtol=1e-6)
        np.testing.assert_allclose(layer.blobs[0].data, mean_sum, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(layer.blobs[1].data, var_sum, rtol=1e-5, atol=1e-6)
    # The saved sums then normalise like the unbiased running averages they stand for.
    test_layer, test_bottom, test_top = set_up(batch_norm(), [second],
                                               phase=caffe_pb2.TEST)
    for mine, theirs in zip(test_layer.blobs, layer.blobs):
        mine.data[...] = theirs.data
    test_layer.forward(test_bottom, test_top)
    expected = reference(second, mean_sum / factor, var_sum / factor)
    np.testing.assert_allclose(test_top[0].data, expected, rtol=1e-4, atol=1e-5)


def test_single_value_per_channel_skips_bias_correction():
    layer, bottom, top = set_up(batch_norm("moving_average_fraction: 0.5"),
                                [np.array([[1.0, -2.0]])])
    layer.forward(bottom, top)
    np.testing.assert_allclose(layer.blobs[1].data, [0, 0])
    np.testing.assert_allclose(layer.blobs[0].data, [1, -2])


def stat_blobs_text(mean, var, factor):
    def blob(values):
        dims = f"shape {{ dim: {len(values)} }}"
        return "blobs { " + dims + "".join(f" data: {v}" for v in values) + " }"
    return blob(mean) + " " + blob(var) + " " + blob([factor])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("factor", [1.0, 2.5])
def test_test_phase_uses_given_stat_blobs(shape, factor):
    channels = shape[1]
    mean = np.linspace(-1, 2, channels)
    var = np.linspace(0.5, 3, channels)
    x = data(shape)
    layer, bottom, top = set_up(batch_norm("", stat_blobs_text(mean, var, factor)), [x],
                                phase=caffe_pb2.TEST)
    assert layer.use_global_stats
    layer.forward(bottom, top)
    expected = reference(x, mean / factor, var / factor)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-5)
    # Global statistics are read, never updated.
    np.testing.assert_allclose(layer.blobs[0].data, mean, rtol=1e-6)
    np.testing.assert_allclose(layer.blobs[2].data, [factor])


def test_zero_scale_factor_means_zero_statistics():
    x = data((2, 3, 2))
    layer, bottom, top = set_up(batch_norm("", stat_blobs_text([1, 2, 3], [4, 5, 6], 0)), [x],
                                phase=caffe_pb2.TEST)
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, x / np.sqrt(1e-5), rtol=1e-5)


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


# The GPU cases: one small input, with given stat blobs (the simulator is slow).
GPU_GRADIENT = [((3, 2, 2), [0.5, -1], [2, 3])]


@pytest.mark.parametrize("engine, shape, given_stats", engine_cases(
    [(shape, None) for shape in SHAPES], [case[:1] + (case[1:],) for case in GPU_GRADIENT],
    unpack=True), indirect=["engine"])
def test_gradient_with_batch_statistics(engine, quick_barriers, shape, given_stats):
    stats = "" if given_stats is None else stat_blobs_text(*given_stats, 1.5)
    layer, bottom, top = set_up(batch_norm("", stats), [data(shape)])
    check_gradient(layer, bottom, top, check_params=False)


@pytest.mark.parametrize("engine, shape, mean, var", engine_cases(
    [(shape, np.linspace(-1, 1, shape[1]), np.linspace(0.5, 2, shape[1])) for shape in SHAPES],
    GPU_GRADIENT, unpack=True), indirect=["engine"])
def test_gradient_with_global_statistics(engine, quick_barriers, shape, mean, var):
    stats = stat_blobs_text(mean, var, 1.5)
    layer, bottom, top = set_up(batch_norm("", stats), [data(shape)], phase=caffe_pb2.TEST)
    check_gradient(layer, bottom, top, check_params=False)


@pytest.mark.parametrize("phase", [caffe_pb2.TRAIN, caffe_pb2.TEST])
def test_in_place_matches_out_of_place(phase):
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
    np.testing.assert_allclose(blob.data, top[0].data, rtol=1e-6, atol=1e-7)
    blob.diff[...] = dy
    in_place.backward([blob], [True], [blob])
    np.testing.assert_allclose(blob.diff, bottom[0].diff, rtol=1e-5, atol=1e-6)


def test_backward_skipped_without_propagate_down():
    layer, bottom, top = set_up(batch_norm(), [data((2, 3))])
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    bottom[0].diff[...] = 7
    layer.backward(top, [False], bottom)
    assert np.all(bottom[0].diff == 7)


def test_blob_counts():
    with pytest.raises(CaffeError, match='"bn"'):
        create_layer(layer_param(batch_norm())).setup([blob_of(data((2, 3)))], empty_blobs(2))


# --- GPU mode: the device path gives the CPU's numbers ------------------------------------------
GPU_SHAPES = [(5, 3), (2, 3, 5), (2, 2, 3, 4)]


@pytest.fixture
def quick_barriers():
    """The CUDA simulator's syncthreads waits for every thread of the block to get the GIL:
    switching threads more often makes the per-channel reductions ~10x quicker."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    yield
    sys.setswitchinterval(interval)


def run_modes(text, x, dy, phase, in_place=False, forwards=1):
    """Forward (``forwards`` times) and backward in CPU then GPU mode on fresh layers with the
    same stat blobs; returns [(top, dx, stat blobs, top head)] per mode."""
    from pycaffe_cli import backend
    results = []
    for gpu in (False, True):
        layer = create_layer(layer_param(text, phase))
        bottom = blob_of(x)
        top = bottom if in_place else blob_of(np.zeros_like(x))
        if gpu:
            backend.set_mode_gpu(0)
        try:
            layer.setup([bottom], [top])
            for _ in range(forwards):
                layer.forward([bottom], [top])
            head = top.data_memory.head
            y = top.cpu_data.copy()
            top.diff[...] = dy
            layer.backward([top], [True], [bottom])
        finally:
            backend.set_mode_cpu()
        blobs = [b.cpu_data.copy() for b in layer.blobs]
        results.append((y, bottom.cpu_diff.copy(), blobs, head))
    return results


@pytest.mark.parametrize("shape", GPU_SHAPES)
@pytest.mark.parametrize("params, phase", [
    ("", caffe_pb2.TRAIN),
    ("eps: 0.25", caffe_pb2.TRAIN),
    ("use_global_stats: false", caffe_pb2.TEST),
    ("", caffe_pb2.TEST),
    ("use_global_stats: true eps: 0.1", caffe_pb2.TRAIN),
])
def test_gpu_matches_cpu(quick_barriers, shape, params, phase):
    from tests.gpu_helpers import compare_layer_modes
    channels = shape[1]
    stats = stat_blobs_text(np.linspace(-1, 1, channels), np.linspace(0.5, 2, channels), 2.5)
    x, dy = data(shape), data(shape, seed=3)
    # Per-channel sums add in a different order on the device: atol covers the rounding of
    # the normalised values (|y| up to ~3) and of the mean(dy * y) term.
    compare_layer_modes(batch_norm(params, stats), [x], top_diffs=[dy], phase=phase,
                        rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("maf", [None, 0.5])
def test_gpu_running_sums_match_cpu_over_two_iterations(quick_barriers, maf):
    params = "" if maf is None else f"moving_average_fraction: {maf}"
    x, dy = data((3, 2, 4), 1), data((3, 2, 4), 2)
    (cpu_y, cpu_dx, cpu_blobs, _), (gpu_y, gpu_dx, gpu_blobs, head) = run_modes(
        batch_norm(params), x, dy, caffe_pb2.TRAIN, forwards=2)
    from pycaffe_cli.synced_memory import Head
    assert head is Head.AT_GPU
    for cpu, gpu in zip(cpu_blobs, gpu_blobs):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gpu_y, cpu_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gpu_dx, cpu_dx, rtol=1e-5, atol=1e-5)


def test_gpu_single_value_per_channel_and_zero_scale_factor(quick_barriers):
    from tests.gpu_helpers import compare_layer_modes
    x = np.array([[1.0, -2.0]])
    compare_layer_modes(batch_norm("moving_average_fraction: 0.5"), [x], top_diffs=[x],
                        phase=caffe_pb2.TRAIN)
    compare_layer_modes(batch_norm("", stat_blobs_text([1, 2, 3], [4, 5, 6], 0)),
                        [data((2, 3, 2))], top_diffs=[data((2, 3, 2), 1)],
                        phase=caffe_pb2.TEST)


@pytest.mark.gpu
@pytest.mark.parametrize("phase", [caffe_pb2.TRAIN, caffe_pb2.TEST])
def test_gpu_in_place_matches_cpu(quick_barriers, phase):
    stats = stat_blobs_text([0.5, -1], [2, 3], 2)
    x, dy = data((3, 2, 4)), data((3, 2, 4), seed=5)
    (cpu_y, cpu_dx, _, _), (gpu_y, gpu_dx, _, _) = run_modes(batch_norm("", stats), x, dy,
                                                             phase, in_place=True)
    np.testing.assert_allclose(gpu_y, cpu_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gpu_dx, cpu_dx, rtol=1e-5, atol=1e-5)


def test_gpu_more_channels_than_blocks(quick_barriers):
    """The conftest's two-block launches make each block reduce several channels."""
    from tests.gpu_helpers import compare_layer_modes
    x, dy = data((2, 5, 3)), data((2, 5, 3), 1)
    compare_layer_modes(batch_norm(), [x], top_diffs=[dy], phase=caffe_pb2.TRAIN, atol=1e-5)
