"""LRN layer: Caffe's reference forward (test_lrn_layer.cpp) and the analytic backward, gradients,
user errors; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer, v1_type_name
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.kernels import reference
from tests.layer_helpers import blob_of, layer_param, set_up


def lrn(params=""):
    return f'name: "norm" type: "LRN" lrn_param {{ {params} }}'


def gaussian(shape=(2, 7, 3, 3), seed=1701):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def lrn_within_backward(x, top_diff, size, alpha, beta):
    """The analytic WITHIN_CHANNEL gradient: with s = 1 + alpha / size^2 * (the window's sum of
    x^2) and y = x s^-beta, dx = dy s^-beta - 2 alpha beta / size^2 x (the window's sum of
    dy y / s) (a pixel is in the window of every pixel in its own window)."""
    x = x.astype(np.float64)
    top_diff = top_diff.astype(np.float64)
    height, width = x.shape[2:]
    pre = (size - 1) // 2

    def window_sum(values):
        out = np.empty_like(values)
        for h in range(height):
            for w in range(width):
                out[:, :, h, w] = values[:, :, max(h - pre, 0):min(h + pre + 1, height),
                                         max(w - pre, 0):min(w + pre + 1, width)].sum(axis=(2, 3))
        return out

    scale = 1.0 + alpha / size ** 2 * window_sum(x ** 2)
    top = x * scale ** -beta
    return (top_diff * scale ** -beta
            - 2.0 * alpha * beta / size ** 2 * x * window_sum(top_diff * top / scale))


@pytest.mark.parametrize("shape", [(2, 7, 3, 3), (2, 7, 3, 4)])
@pytest.mark.parametrize("params, size, alpha, beta, k", [
    ("", 5, 1.0, 0.75, 1.0),                                    # TestForwardAcrossChannels
    ("local_size: 15", 15, 1.0, 0.75, 1.0),                     # ...LargeRegion
    ("local_size: 3 alpha: 0.0001 beta: 0.75 k: 2", 3, 1e-4, 0.75, 2.0),
    ("local_size: 3 k: 2 alpha: 0.5", 3, 0.5, 0.75, 2.0),
    ("local_size: 1 alpha: 3 beta: 0.5", 1, 3.0, 0.5, 1.0),
])
def test_across_channels_forward_backward(params, size, alpha, beta, k, shape, engine):
    x, dy = gaussian(shape), gaussian(shape, seed=5)
    layer, bottom, top = set_up(lrn(params), [x])
    assert top[0].shape == x.shape
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    want, _ = reference.lrn_across(x, size, alpha, beta, k)
    np.testing.assert_allclose(top[0].cpu_data, want, rtol=1e-5, atol=1e-5)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].cpu_diff,
                               reference.lrn_across_backward(x, dy, size, alpha, beta, k),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("params, size, alpha, beta", [
    ("local_size: 3", 3, 1.0, 0.75),                            # TestForwardWithinChannel
    ("local_size: 5 alpha: 0.5 beta: 0.6", 5, 0.5, 0.6),
    ("local_size: 5 alpha: 0.5 beta: 0.6 k: 7", 5, 0.5, 0.6),   # k plays no part
])
def test_within_channel_forward_backward(params, size, alpha, beta, engine):
    x, dy = gaussian((2, 3, 4, 5)), gaussian((2, 3, 4, 5), seed=9)
    layer, bottom, top = set_up(lrn(params + " norm_region: WITHIN_CHANNEL"), [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    np.testing.assert_allclose(top[0].cpu_data, reference.lrn_within(x, size, alpha, beta),
                               rtol=1e-5, atol=1e-5)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].cpu_diff, lrn_within_backward(x, dy, size, alpha, beta),
                               rtol=1e-5, atol=1e-5)


# test_lrn_layer.cpp TestGradient{AcrossChannels,AcrossChannelsLargeRegion,WithinChannel}
# (on 2x7x3x3 there), exhaustively on the CPU; the GPU cases (the simulator is slow) smaller,
# with random probes.
@pytest.mark.parametrize("engine, params, shape, mode", engine_cases(
    [(params, (1, 7, 3, 3), "exhaustive") for params in [
        "", "local_size: 15", "local_size: 3 k: 2 alpha: 0.5",
        "local_size: 3 norm_region: WITHIN_CHANNEL",
        "local_size: 5 norm_region: WITHIN_CHANNEL beta: 1.5"]],
    [("local_size: 3 alpha: 0.5", (1, 5, 3, 3), "random"),
     ("local_size: 3 norm_region: WITHIN_CHANNEL beta: 1.5", (1, 2, 4, 4), "random")],
    unpack=True), indirect=["engine"])
def test_gradient(engine, params, shape, mode):
    layer, bottom, top = set_up(lrn(params), [gaussian(shape)])
    check_gradient(layer, bottom, top, mode=mode)


@pytest.mark.parametrize("region", ["ACROSS_CHANNELS", "WITHIN_CHANNEL"])
def test_gradient_on_a_multi_block_image(region):
    # 24x25 = 600 pixels: two pixel blocks in the across-channel kernels.
    layer, bottom, top = set_up(lrn(f"local_size: 3 alpha: 0.1 norm_region: {region}"),
                                [gaussian((2, 4, 24, 25))])
    check_gradient(layer, bottom, top)


def test_reshape_follows_a_new_input_shape():
    layer, bottom, top = set_up(lrn("local_size: 3"), [gaussian((1, 4, 2, 2))])
    x = gaussian((2, 5, 3, 4), seed=3)
    bigger = blob_of(x)
    layer.forward([bigger], top)
    np.testing.assert_allclose(top[0].data, reference.lrn_across(x, 3, 1.0, 0.75, 1.0)[0],
                               rtol=1e-5, atol=1e-5)


def test_backward_respects_propagate_down():
    layer, bottom, top = set_up(lrn(), [gaussian()])
    layer.forward(bottom, top)
    bottom[0].diff[...] = 7
    layer.backward(top, [False], bottom)
    np.testing.assert_array_equal(bottom[0].diff, 7)


def test_v1_name():
    assert v1_type_name("LRN") == "LRN"


@pytest.mark.parametrize("params, shape, message", [
    ("local_size: 4", (1, 3, 2, 2), "odd values for local_size, got 4"),
    ("local_size: 0", (1, 3, 2, 2), "odd values for local_size, got 0"),
    ("", (3, 2, 2), "input must have 4 axes"),
    ("norm_region: WITHIN_CHANNEL", (1, 2, 3, 3, 3), "input must have 4 axes"),
])
def test_user_errors_name_the_layer(params, shape, message):
    with pytest.raises(CaffeError, match=f'layer "norm".*{message}'):
        set_up(lrn(params), [np.zeros(shape)])


def test_in_place_is_an_error():
    layer = create_layer(layer_param(lrn()))
    blob = blob_of(np.zeros((1, 3, 2, 2)))
    with pytest.raises(CaffeError, match='"norm".*in-place'):
        layer.setup([blob], [blob])
