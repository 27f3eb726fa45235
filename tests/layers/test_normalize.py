"""Normalize layer (SSD's fork): forward and backward against a float64 numpy reference, for
all four across_spatial x channel_shared settings, gradients, GPU against CPU, user errors."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, compare_layer_modes
from tests.layer_helpers import blob_of, layer_param, set_up

SETTINGS = [(across, shared) for across in (True, False) for shared in (True, False)]
IDS = [f"{'across' if a else 'per_position'}-{'shared' if s else 'per_channel'}"
       for a, s in SETTINGS]


def normalize(across=True, shared=True, extra=""):
    flags = f"across_spatial: {str(across).lower()} channel_shared: {str(shared).lower()}"
    return f'name: "norm" type: "Normalize" norm_param {{ {flags} {extra} }}'


def gaussian(shape, seed=1701):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def reference(x, scale, dy, across, eps=1e-10):
    """(y, dx, dscale) in float64, written out element by element over (N, C, S)."""
    x = x.astype(np.float64)
    dy = dy.astype(np.float64)
    num, channels = x.shape[:2]
    x3 = x.reshape(num, channels, -1)
    dy3 = dy.reshape(num, channels, -1)
    inner = x3.shape[2]
    scale = np.asarray(scale, np.float64).reshape(-1)
    per_c = np.broadcast_to(scale, (channels,)) if scale.size == 1 else scale
    y, dx = np.empty_like(x3), np.empty_like(x3)
    dscale = np.zeros(channels)
    for n in range(num):
        groups = [slice(None)] if across else range(inner)
        for group in groups:
            xs, dys = x3[n][:, group], dy3[n][:, group]
            norm = np.sqrt(np.sum(xs * xs) + eps)
            dot = sum(np.sum(per_c[c] * xs[c] * dys[c]) for c in range(channels))
            for c in range(channels):
                y[n, c, group] = per_c[c] * xs[c] / norm
                dx[n, c, group] = per_c[c] * dys[c] / norm - xs[c] * dot / norm ** 3
                dscale[c] += np.sum(dys[c] * xs[c] / norm)
    if scale.size == 1:
        dscale = np.array([dscale.sum()])
    return y.reshape(x.shape), dx.reshape(x.shape), dscale


@pytest.mark.parametrize("across, shared", SETTINGS, ids=IDS)
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (3, 6), (2, 4, 7)])
def test_forward_and_backward_match_the_reference(across, shared, shape, engine):
    x, dy = gaussian(shape), gaussian(shape, seed=5)
    layer, bottom, top = set_up(normalize(across, shared), [x])
    channels = shape[1]
    assert layer.blobs[0].shape == (() if shared else (channels,))
    scale = (np.float32(1.5) if shared
             else np.linspace(0.5, 2.0, channels, dtype=np.float32))
    layer.blobs[0].data[...] = scale
    layer.blobs[0].diff[...] = 0
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    want_y, want_dx, want_dscale = reference(x, scale, dy, across)
    # float32 rounding of a few operations per value; the sums are float64
    np.testing.assert_allclose(top[0].cpu_data, want_y, rtol=1e-5, atol=1e-6)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].cpu_diff, want_dx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(layer.blobs[0].cpu_diff.reshape(-1), want_dscale, rtol=1e-4,
                               atol=1e-5)


def test_a_constant_input_normalises_to_unit_norm_times_the_scale():
    # the fork's SSD use: per position over 512 channels, the scale initialised to 20
    x = np.full((1, 4, 2, 3), 3.0, np.float32)
    layer, bottom, top = set_up(normalize(False, False, 'scale_filler { type: "constant" '
                                                        'value: 20 }'), [x])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, 20 * 0.5, rtol=1e-6)
    np.testing.assert_array_equal(layer.blobs[0].data, 20)


def test_eps_is_added_under_the_root():
    x = np.zeros((1, 2, 1, 1), np.float32)
    x[0, 0] = 3e-5
    layer, bottom, top = set_up(normalize(extra="eps: 1e-9"), [x])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data[0, 0, 0, 0], 3e-5 / np.sqrt(9e-10 + 1e-9),
                               rtol=1e-5)
    # an all-zero input stays zero (eps keeps the norm positive)
    layer.forward([blob_of(np.zeros((1, 2, 1, 1)))], top)
    np.testing.assert_array_equal(top[0].data, 0)


def test_the_scale_gradient_accumulates_and_propagate_down_is_respected():
    x, dy = gaussian((2, 3, 2, 2)), gaussian((2, 3, 2, 2), seed=3)
    layer, bottom, top = set_up(normalize(False, False), [x])
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.blobs[0].diff[...] = 1
    bottom[0].diff[...] = 7
    layer.backward(top, [False], bottom)
    np.testing.assert_array_equal(bottom[0].diff, 7)
    _, _, dscale = reference(x, np.ones(3), dy, across=False)
    np.testing.assert_allclose(layer.blobs[0].diff, 1 + dscale, rtol=1e-5)
    layer.param_propagate_down = [False]
    layer.backward(top, [True], bottom)
    np.testing.assert_allclose(layer.blobs[0].diff, 1 + dscale, rtol=1e-5)


# The fork's gradient tests (2x3x4x5 there), exhaustively on a smaller input, with one scale
# value for every channel (where the fork's bottom gradient is exact too) and with different
# ones (where only the exact gradient passes); a 0-axis (shared) scale's own gradient by
# random probes.
@pytest.mark.parametrize("across, shared", SETTINGS, ids=IDS)
def test_gradient(across, shared):
    layer, bottom, top = set_up(normalize(across, shared), [gaussian((2, 3, 2, 2))])
    scale = layer.blobs[0]
    scale.data[...] = 1.3
    check_gradient(layer, bottom, top, mode="exhaustive", check_params=False)
    scale.data[...] = np.linspace(0.5, 1.5, scale.count()).reshape(scale.shape)
    check_gradient(layer, bottom, top, mode="random" if shared else "exhaustive")


@pytest.mark.parametrize("across", [False, True], ids=["per_position", "across_spatial"])
def test_the_bottom_gradient_is_exact_where_the_forks_is_not(across):
    """With per-channel scales that differ, the fork leaves the scale out of the dot product,
    s_c (dy - x sum(x dy) / n^2) / n; the exact gradient is s_c dy / n - x sum(s x dy) / n^3."""
    x, dy = gaussian((1, 3, 1, 2)), gaussian((1, 3, 1, 2), seed=2)
    scale = np.array([0.5, 1.0, 4.0], np.float32)
    layer, bottom, top = set_up(normalize(across, False), [x])
    layer.blobs[0].data[...] = scale
    layer.forward(bottom, top)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    x64, dy64, s = x.astype(np.float64), dy.astype(np.float64), scale[None, :, None, None]
    axes = (1, 2, 3) if across else (1,)
    norm = np.sqrt((x64 ** 2).sum(axis=axes, keepdims=True) + 1e-10)
    forks = s * (dy64 - x64 * (x64 * dy64).sum(axis=axes, keepdims=True) / norm ** 2) / norm
    exact = s * dy64 / norm - x64 * (s * x64 * dy64).sum(axis=axes, keepdims=True) / norm ** 3
    np.testing.assert_allclose(bottom[0].diff, exact, rtol=1e-5, atol=1e-6)
    assert not np.allclose(forks, exact, rtol=1e-2)


@pytest.mark.parametrize("across, shared", SETTINGS, ids=IDS)
def test_gpu_matches_cpu(across, shared):
    shape = (2, 3, 2, 3)
    scale = [np.float32(0.8)] if shared else [np.array([0.5, 1.0, 2.0], np.float32)]
    compare_layer_modes(normalize(across, shared), [gaussian(shape)],
                        top_diffs=[gaussian(shape, seed=9)], params=scale,
                        rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("text, shape, message", [
    (normalize(), (6,), "2 to 4 axes"),
    (normalize(), (1, 2, 3, 4, 5), "2 to 4 axes"),
])
def test_user_errors_name_the_layer(text, shape, message):
    with pytest.raises(CaffeError, match=f'layer "norm".*{message}'):
        set_up(text, [np.zeros(shape)])


def test_loaded_scale_of_the_wrong_size_and_in_place_are_errors():
    param = layer_param(normalize(True, False))
    param.blobs.add().shape.dim.append(5)
    param.blobs[0].data.extend([1.0] * 5)
    with pytest.raises(CaffeError, match='layer "norm".*Scale size is inconsistent.*3 '
                                         'channels'):
        create_layer(param).setup([blob_of(np.zeros((1, 3, 2, 2)))], [blob_of([0])])
    layer = create_layer(layer_param(normalize()))
    blob = blob_of(np.ones((1, 3, 2, 2)))
    with pytest.raises(CaffeError, match='layer "norm".*in-place'):
        layer.setup([blob], [blob])
