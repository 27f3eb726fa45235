"""Convolution: forward against naive window sums, gradients, Caffe's checks, errors."""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.layers.convolution.plan import Plan
from pycaffe_cli.testing import check_gradient
from tests.layer_helpers import blob_of, layer_param, set_up
from tests.layers.conv_helpers import forced_plan
from tests.layers.conv_reference import CASES_2D, case_params, convolve
from tests.numerics import close_to


def conv(params, blobs="", name="conv"):
    return (f'name: "{name}" type: "Convolution" convolution_param {{ '
            f'weight_filler {{ type: "gaussian" std: 1 }} '
            f'bias_filler {{ type: "uniform" min: -1 max: 1 }} {params} }} {blobs}')


def run_forward(text, shape, geometry, group, bias, seed=0):
    backend.set_random_seed(seed)
    x = np.random.default_rng(seed + 1).normal(size=shape)
    layer, bottom, top = set_up(conv(text), [x])
    layer.forward(bottom, top)
    b = layer.blobs[1].data if bias else None
    expected = convolve(bottom[0].data, layer.blobs[0].data, b, *geometry, group)
    return layer, bottom, top, expected


@pytest.mark.parametrize("kernel, pad, stride, dilation, group, bias", CASES_2D)
def test_forward_2d(kernel, pad, stride, dilation, group, bias):
    text, k = case_params(kernel, pad, stride, dilation, group, bias, 4)
    layer, bottom, top, expected = run_forward(
        text, (2, 4, 5, 6), ((pad,) * 2, (stride,) * 2, (dilation,) * 2), group, bias)
    assert layer.blobs[0].shape == (4, 4 // group) + k
    assert len(layer.blobs) == (2 if bias else 1)
    assert top[0].shape == expected.shape
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-5)


# Groups of 2 channels run the DIRECT plan (layers/convolution/plan.py); the GEMM plan, forced.
@pytest.mark.parametrize("kernel, pad, stride, dilation, group, bias",
                         [case for case in CASES_2D if case[4] > 1])
def test_grouped_gemm_plan_forward_2d(kernel, pad, stride, dilation, group, bias):
    text, _ = case_params(kernel, pad, stride, dilation, group, bias, 4)
    backend.set_random_seed(0)
    x = np.random.default_rng(1).normal(size=(2, 4, 5, 6))
    layer, bottom, top = set_up(conv(text), [x])
    assert layer.plan is Plan.DIRECT
    with forced_plan(Plan.GEMM):
        layer.forward(bottom, top)
        assert layer.plan is Plan.GEMM
        expected = convolve(bottom[0].data, layer.blobs[0].data,
                            layer.blobs[1].data if bias else None, (pad,) * 2, (stride,) * 2,
                            (dilation,) * 2, group)
        np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-5)
        if kernel == "k3" and bias:
            check_gradient(layer, bottom, top)


@pytest.mark.parametrize("kernel, pad, stride, dilation, group, bias", CASES_2D)
def test_gradient_2d(kernel, pad, stride, dilation, group, bias):
    text, _ = case_params(kernel, pad, stride, dilation, group, bias, 4)
    backend.set_random_seed(0)
    x = np.random.default_rng(2).normal(size=(2, 4, 5, 6))
    layer, bottom, top = set_up(conv(text), [x])
    check_gradient(layer, bottom, top)


ND_CASES = [  # shape, params, pad, stride, dilation, group
    ((2, 4, 4, 5, 3), "kernel_size: 3 pad: 1 num_output: 4", (1,) * 3, (1,) * 3, (1,) * 3, 1),
    ((2, 4, 5, 4, 6), "kernel_size: 2 kernel_size: 3 kernel_size: 1 pad: 0 pad: 1 pad: 1 "
     "stride: 2 stride: 1 stride: 2 dilation: 2 dilation: 1 dilation: 1 group: 2 num_output: 2",
     (0, 1, 1), (2, 1, 2), (2, 1, 1), 2),
    ((2, 3, 7), "kernel_size: 3 stride: 2 dilation: 2 pad: 2 num_output: 5", (2,), (2,), (2,),
     1),
    ((2, 4, 5, 6), "kernel_size: 3 pad: 1 stride: 2 group: 2 num_output: 4 "
     "force_nd_im2col: true", (1, 1), (2, 2), (1, 1), 2),
    ((2, 4, 3, 4, 2), "kernel_size: 1 num_output: 6 group: 2", (0,) * 3, (1,) * 3, (1,) * 3,
     2),
]


@pytest.mark.parametrize("shape, params, pad, stride, dilation, group", ND_CASES)
def test_nd_forward_and_gradient(shape, params, pad, stride, dilation, group):
    layer, bottom, top, expected = run_forward(params, shape, (pad, stride, dilation), group,
                                               True)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-5)
    check_gradient(layer, bottom, top)


def test_channel_axis_other_than_1():
    # axis 2: the first two axes are both "batch"; a 2-d convolution over the last two.
    backend.set_random_seed(0)
    x = np.random.default_rng(3).normal(size=(2, 3, 4, 5, 6))
    layer, bottom, top = set_up(conv("kernel_size: 3 pad: 1 stride: 2 num_output: 2 axis: 2"),
                                [x])
    layer.forward(bottom, top)
    expected = convolve(x.reshape(6, 4, 5, 6), layer.blobs[0].data, layer.blobs[1].data,
                        (1, 1), (2, 2), (1, 1), 1)
    assert top[0].shape == (2, 3, 2, 3, 3)
    np.testing.assert_allclose(top[0].data.reshape(expected.shape), expected, rtol=1e-5,
                               atol=1e-5)
    check_gradient(layer, bottom, top)


def test_several_bottoms_share_the_filters():
    backend.set_random_seed(0)
    rng = np.random.default_rng(4)
    xs = [rng.normal(size=(2, 3, 6, 4)) for _ in range(2)]
    layer, bottom, top = set_up(conv("kernel_size: 3 stride: 2 num_output: 4"), xs,
                                num_tops=2)
    layer.forward(bottom, top)
    for x, y in zip(bottom, top):
        expected = convolve(x.data, layer.blobs[0].data, layer.blobs[1].data, (0, 0), (2, 2),
                            (1, 1), 1)
        np.testing.assert_allclose(y.data, expected, rtol=1e-5, atol=1e-5)
    check_gradient(layer, bottom, top)


def test_hand_computed_box_filter():
    # All-ones 3x3 filter, pad 1, on an all-ones 4x4 image: counts of in-image taps.
    blobs = "blobs { shape { dim: 1 dim: 1 dim: 3 dim: 3 } " + "data: 1 " * 9 + "}"
    layer, bottom, top = set_up(conv("kernel_size: 3 pad: 1 num_output: 1 bias_term: false",
                                     blobs), [np.ones((1, 1, 4, 4))])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data[0, 0], [[4, 6, 6, 4], [6, 9, 9, 6],
                                                      [6, 9, 9, 6], [4, 6, 6, 4]])


def test_sobel_equals_separable_filters():
    # Caffe's TestSobelConvolution: the 3x3 Sobel filter equals [1 2 1]^T then [-1 0 1].
    x = np.random.default_rng(5).normal(size=(2, 3, 6, 4))
    sobel = np.array([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]], np.float32)
    weights = np.broadcast_to(sobel, (1, 3, 3, 3)).ravel()
    blobs = ("blobs { shape { dim: 1 dim: 3 dim: 3 dim: 3 } "
             + " ".join(f"data: {v}" for v in weights) + " }")
    layer, bottom, top = set_up(conv("kernel_size: 3 stride: 2 num_output: 1 bias_term: false",
                                     blobs), [x])
    layer.forward(bottom, top)
    vertical = "blobs { shape { dim: 1 dim: 3 dim: 3 dim: 1 } " + "data: 1 data: 2 data: 1 " * 3
    first, b1, t1 = set_up(conv("kernel_h: 3 kernel_w: 1 stride_h: 2 stride_w: 1 num_output: 1 "
                                "bias_term: false", vertical + "}"), [x])
    first.forward(b1, t1)
    horizontal = "blobs { shape { dim: 1 dim: 1 dim: 1 dim: 3 } data: -1 data: 0 data: 1 }"
    second, b2, t2 = set_up(conv("kernel_h: 1 kernel_w: 3 stride_h: 1 stride_w: 2 "
                                 "num_output: 1 bias_term: false", horizontal), [t1[0].data])
    second.forward(b2, t2)
    np.testing.assert_allclose(top[0].data, t2[0].data, rtol=1e-5, atol=1e-5)


def test_param_gradients_accumulate_and_frozen_params_are_skipped():
    backend.set_random_seed(0)
    x = np.random.default_rng(6).normal(size=(2, 2, 4, 4))
    layer, bottom, top = set_up(conv("kernel_size: 3 num_output: 2"), [x])
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    layer.backward(top, [False], bottom)
    once = [b.diff.copy() for b in layer.blobs]
    np.testing.assert_allclose(once[1], [8, 8])          # 2 images x 2 x 2 outputs
    layer.backward(top, [False], bottom)
    for blob, first in zip(layer.blobs, once):
        close_to(blob.diff, 2 * first, rtol=1e-6)
    np.testing.assert_array_equal(bottom[0].diff, 0)     # propagate_down false
    layer.param_propagate_down = [False, False]
    layer.backward(top, [True], bottom)
    close_to(layer.blobs[0].diff, 2 * once[0], rtol=1e-6)
    assert np.abs(bottom[0].diff).sum() > 0


def test_large_batches_run_in_blocks(monkeypatch, engine):
    import pycaffe_cli.layers.convolution.base as base
    backend.set_random_seed(0)
    x = np.random.default_rng(7).normal(size=(5, 2, 5, 5))
    monkeypatch.setattr(base, "COL_BUFFER_LIMIT", 2 * 18 * 9)   # two images per block
    layer, bottom, top = set_up(conv("kernel_size: 3 num_output: 3"), [x])
    assert layer.blocks() == [(0, 2), (2, 2), (4, 1)]
    layer.forward(bottom, top)
    expected = convolve(x, layer.blobs[0].data, layer.blobs[1].data, (0, 0), (1, 1), (1, 1), 1)
    np.testing.assert_allclose(top[0].cpu_data, expected, rtol=1e-5, atol=1e-5)
    check_gradient(layer, bottom, top)


def test_reshape_follows_the_input_size():
    backend.set_random_seed(0)
    layer, bottom, top = set_up(conv("kernel_size: 3 num_output: 2"), [np.ones((1, 2, 5, 5))])
    bottom[0].reshape((3, 2, 8, 7))
    bottom[0].data[...] = np.random.default_rng(8).normal(size=(3, 2, 8, 7))
    layer.forward(bottom, top)
    expected = convolve(bottom[0].data, layer.blobs[0].data, layer.blobs[1].data, (0, 0),
                        (1, 1), (1, 1), 1)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-5)


def test_given_blobs_with_legacy_bias_shape():
    blobs = ("blobs { shape { dim: 2 dim: 1 dim: 1 dim: 1 } data: 2 data: 3 } "
             "blobs { num: 1 channels: 1 height: 1 width: 2 data: 10 data: 20 }")
    layer, bottom, top = set_up(conv("kernel_size: 1 num_output: 2", blobs),
                                [np.ones((1, 1, 2, 2))])
    assert layer.blobs[1].shape == (2,)
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data[0, :, 0, 0], [12, 23])


@pytest.mark.parametrize("params, shape, message", [
    ("num_output: 2", (2, 3, 5, 5), "kernel size must be specified"),
    ("kernel_size: 3", (2, 3, 5, 5), "num_output must be positive"),
    ("kernel_size: 3 num_output: 4 group: 2", (2, 3, 5, 5), "not divisible by group 2"),
    ("kernel_size: 3 num_output: 4 group: 3", (2, 6, 5, 5), "should be multiples of group"),
    ("kernel_size: 3 num_output: 3 group: 0", (2, 6, 5, 5), "group must be positive"),
    ("kernel_size: 7 num_output: 3", (2, 3, 5, 5), "does not fit the input"),
    ("kernel_h: 3 kernel_w: 3 num_output: 3", (2, 3, 5, 5, 5), "only be used for 2-d"),
    ("kernel_size: 3 num_output: 2 axis: 4", (2, 3, 5, 5), "axis"),
])
def test_setup_errors(params, shape, message):
    with pytest.raises(CaffeError, match=f'"conv".*{message}'):
        set_up(conv(params), [np.ones(shape)])


def test_given_blobs_of_the_wrong_shape():
    blobs = "blobs { shape { dim: 2 dim: 3 dim: 3 dim: 3 } }"
    with pytest.raises(CaffeError, match='"conv".*Incorrect number of weight blobs'):
        set_up(conv("kernel_size: 3 num_output: 2", blobs), [np.ones((1, 3, 5, 5))])
    blobs += " blobs { shape { dim: 2 } }"
    with pytest.raises(CaffeError, match=r'"conv".*Incorrect weight shape: expected shape '
                                         r'2 2 3 3 \(36\); instead, shape was 2 3 3 3'):
        set_up(conv("kernel_size: 3 num_output: 2", blobs), [np.ones((1, 2, 5, 5))])


def test_channel_and_shape_mismatch_at_reshape():
    backend.set_random_seed(0)
    layer, bottom, top = set_up(conv("kernel_size: 3 num_output: 2"), [np.ones((1, 3, 5, 5))])
    bottom[0].reshape((1, 4, 5, 5))
    with pytest.raises(CaffeError, match='"conv".*Input size incompatible with convolution'):
        layer.forward(bottom, top)
    bottom[0].reshape((1, 3, 5, 5, 1))
    with pytest.raises(CaffeError, match='"conv".*num_axes may not change'):
        layer.forward(bottom, top)
    layer, bottom, top = set_up(conv("kernel_size: 3 num_output: 2"),
                                [np.ones((1, 3, 5, 5))] * 2, num_tops=2)
    bottom[1].reshape((1, 3, 6, 5))
    with pytest.raises(CaffeError, match='"conv".*All inputs must have the same shape'):
        layer.forward(bottom, top)


def test_blob_counts_and_v1_name():
    layer = create_layer(layer_param(conv("kernel_size: 3 num_output: 2")))
    with pytest.raises(CaffeError, match='"conv".*at least 1 top'):
        layer.setup([blob_of(np.ones((1, 3, 5, 5)))], [])
    with pytest.raises(CaffeError, match='"conv".*as many tops as bottoms'):
        layer.setup([blob_of(np.ones((1, 3, 5, 5)))] * 2, [blob_of(np.ones(1))])
    from pycaffe_cli.layers.base import v1_type_name
    assert v1_type_name("CONVOLUTION") == "Convolution"


def test_engine_is_accepted():
    backend.set_random_seed(0)
    layer, bottom, top = set_up(conv("kernel_size: 3 num_output: 2 engine: CUDNN"),
                                [np.ones((1, 3, 5, 5))])
    layer.forward(bottom, top)
    assert top[0].shape == (1, 2, 3, 3)


# --- GPU mode (the CUDA simulator in CI) ------------------------------------------------------
def compare_modes(text, x, seed=5):
    """CPU vs GPU forward and backward for one convolution_param text; returns the outputs."""
    from tests.gpu_helpers import compare_layer_modes
    backend.set_random_seed(0)
    out = compare_layer_modes(conv(text), [x])[0]
    dy = np.random.default_rng(seed).normal(size=out[0].shape)
    backend.set_random_seed(0)
    return compare_layer_modes(conv(text), [x], top_diffs=[dy], rtol=1e-4, atol=1e-4)


# CASES_2D[::9] starts with a 1x1 window (the pure-GEMM path); CASES_2D[3] is a grouped one.
@pytest.mark.parametrize("kernel, pad, stride, dilation, group, bias",
                         CASES_2D[::9] + [CASES_2D[3]])
def test_cpu_and_gpu_agree(kernel, pad, stride, dilation, group, bias):
    text, _ = case_params(kernel, pad, stride, dilation, group, bias, 4)
    compare_modes(text, np.random.default_rng(3).normal(size=(2, 4, 5, 6)))


def test_gradient_with_groups_and_several_bottoms(engine):
    backend.set_random_seed(0)
    rng = np.random.default_rng(4)
    layer, bottom, top = set_up(conv("kernel_size: 3 pad: 1 stride: 2 group: 2 num_output: 4"),
                                [rng.normal(size=(2, 4, 5, 5)), rng.normal(size=(2, 4, 5, 5))],
                                num_tops=2)
    check_gradient(layer, bottom, top)


def test_nd_windows_fall_back_to_the_cpu_in_gpu_mode(gpu_mode, caplog, monkeypatch):
    monkeypatch.setitem(backend._state, "logged", set())
    backend.set_random_seed(0)
    x = np.random.default_rng(1).normal(size=(2, 2, 3, 4, 3))
    layer, bottom, top = set_up(conv("kernel_size: 2 num_output: 2"), [x])
    layer.forward(bottom, top)
    expected = convolve(x, layer.blobs[0].data, layer.blobs[1].data, (0,) * 3, (1,) * 3,
                        (1,) * 3, 1)
    np.testing.assert_allclose(top[0].cpu_data, expected, rtol=1e-5, atol=1e-5)
    assert "have no GPU path; running them on the CPU" in caplog.text


def count_im2col(layer):
    """Count the layer's im2col runs (either mode) in ``calls``."""
    calls = []
    for name in ("im2col", "gpu_im2col"):
        original = getattr(layer.geometry, name)
        setattr(layer.geometry, name, lambda *args, _f=original: (calls.append(1), _f(*args)))
    return calls


def weight_gradient(layer, bottom, top, dy):
    top[0].diff[...] = dy
    layer.blobs[0].diff[...] = 0
    layer.backward(top, [False], bottom)
    return layer.blobs[0].cpu_diff.copy()


def fresh_weight_gradient(x, weights, dy):
    layer, bottom, top = set_up(conv("kernel_size: 3 num_output: 4"), [x])
    layer.blobs[0].data[...] = weights
    layer.forward(bottom, top)
    return weight_gradient(layer, bottom, top, dy)


def test_weight_gradient_reuses_the_forward_columns_while_they_hold(engine):
    rng = np.random.default_rng(3)
    x, x2 = rng.normal(size=(2, 2, 3, 6, 6))
    dy = rng.normal(size=(2, 4, 4, 4))
    layer, bottom, top = set_up(conv("kernel_size: 3 num_output: 4"), [x])
    weights = layer.blobs[0].data.copy()
    layer.forward(bottom, top)
    calls = count_im2col(layer)
    np.testing.assert_array_equal(weight_gradient(layer, bottom, top, dy),
                                  fresh_weight_gradient(x, weights, dy))
    assert calls == []   # the columns of the forward
    bottom[0].data[...] = x2   # written since: the columns are stale
    np.testing.assert_array_equal(weight_gradient(layer, bottom, top, dy),
                                  fresh_weight_gradient(x2, weights, dy))
    assert calls == [1]


def test_a_layer_sharing_the_column_buffer_makes_the_columns_stale():
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(2, 2, 3, 6, 6))
    dy = rng.normal(size=(2, 4, 4, 4))
    first, bottom, top = set_up(conv("kernel_size: 3 num_output: 4"), [x])
    second, other_bottom, other_top = set_up(conv("kernel_size: 3 num_output: 4"), [y])
    second.inference().share_workspace(first)
    weights = first.blobs[0].data.copy()
    first.forward(bottom, top)
    second.forward(other_bottom, other_top)   # overwrites the shared column buffer
    calls = count_im2col(first)
    np.testing.assert_array_equal(weight_gradient(first, bottom, top, dy),
                                  fresh_weight_gradient(x, weights, dy))
    assert calls == [1]
