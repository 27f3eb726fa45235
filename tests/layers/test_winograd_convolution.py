"""Winograd F(4x4, 3x3) in the inference pass of Convolution: the kernels against naive
window sums (float64) within the proven float32 bound (tests/layers/winograd_reference.py),
which layers take it (layers/convolution/plan.py's winograd_fits, winograd_error.fits), and
when the transformed weights are recomputed."""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.blob import read_only
from pycaffe_cli.layers.convolution.plan import WINOGRAD_MIN_IN, WINOGRAD_MIN_TILES, \
    winograd_fits
from pycaffe_cli.layers.kernels.cpu import conv_image, winograd, winograd_error, winograd_image
from tests.layer_helpers import set_up
from tests.layers.conv_helpers import forced_winograd
from tests.layers.conv_reference import convolve
from tests.layers.winograd_reference import gemm_bound, winograd_bound
from tests.numerics import assert_within, gamma

KERNEL_CASES = [  # num, channels, out_channels, height, width, pad, tiles a block
    (1, 1, 1, 6, 6, 0, 1000),    # one tile, no padding
    (2, 3, 5, 9, 11, 1, 1000),   # edge tiles cut off on both axes
    (3, 4, 6, 8, 8, 1, 5),       # blocks of 5 tiles crossing images
    (1, 2, 3, 4, 7, 2, 3),       # pad 2: outputs larger than the input
    (2, 16, 32, 10, 6, 1, 7),
    (1, 5, 4, 3, 3, 1, 1),       # one tile a block
    # Few tiles, many channels: both transforms run blocks of channels (winograd.BLOCK_PAIRS
    # pairs), the last one partial; the second case in threads.
    (1, 300, 260, 4, 4, 1, 1000),
    (4, 250, 251, 10, 10, 1, 1000),
    # (channel, tile) pairs past winograd.PARALLEL_MIN_JOBS: both transforms in threads
    (2, 64, 64, 26, 26, 1, 1000),
]


def reference(x, weights, bias, pad, relu_slope):
    want = convolve(x, weights, bias, (pad, pad), (1, 1), (1, 1), 1)
    if relu_slope is not None:
        want = np.where(want > 0, want, want * relu_slope)
    return want


def run_kernel(x, weights, bias, pad, relu_slope, block):
    num, channels, height, width = x.shape
    out_channels = weights.shape[0]
    out = np.full((num, out_channels, height + 2 * pad - 2, width + 2 * pad - 2), np.nan,
                  np.float32)
    v = np.empty(winograd.POINTS * channels * block, np.float32)
    m = np.empty(winograd.POINTS * out_channels * block, np.float32)
    winograd.forward(x.ravel(), num, channels, height, width, pad, pad,
                     winograd.transform_weights(weights), out_channels,
                     None if bias is None else read_only(bias), relu_slope,
                     out.ravel(), v, m, block)
    return out


@pytest.mark.parametrize("case", KERNEL_CASES, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("with_bias, relu_slope", [(True, None), (False, None), (True, 0.0),
                                                   (True, 0.25)])
def test_kernel_matches_window_sums(case, with_bias, relu_slope):
    num, channels, out_channels, height, width, pad, block = case
    rng = np.random.default_rng(sum(case))
    x = rng.standard_normal((num, channels, height, width)).astype(np.float32)
    weights = rng.standard_normal((out_channels, channels, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(out_channels).astype(np.float32) if with_bias else None
    got = run_kernel(x, weights, bias, pad, relu_slope, block)
    want = reference(x, weights, bias, pad, relu_slope)
    assert_within(got, want, winograd_bound(x, weights, bias, pad), "Winograd")


@pytest.mark.parametrize("offset", [0, 100, 255])
def test_offset_inputs_and_zero_sum_filters_stay_within_the_bound(offset):
    """Raw pixels (0-255) and edge-detecting filters: the exact outputs are small next to
    the inputs, and both ways round in proportion to the inputs; the bound says how much."""
    rng = np.random.default_rng(offset)
    x = (offset + rng.standard_normal((1, 32, 12, 12))).astype(np.float32)
    weights = rng.standard_normal((32, 32, 3, 3))
    weights -= weights.mean(axis=(2, 3), keepdims=True)
    weights = weights.astype(np.float32)
    got = run_kernel(x, weights, None, 1, None, 1000)
    want = reference(x, weights, None, 1, None)
    assert_within(got, want, winograd_bound(x, weights, None, 1), "Winograd")


def test_the_bound_matrices_are_the_kernels_transforms():
    """B^T and A^T in winograd_error (which the bound is computed from) form, with G, a
    Winograd algorithm (exact in float64), and are what the input transform computes."""
    rng = np.random.default_rng(3)
    g, d = rng.standard_normal((3, 3)), rng.standard_normal((6, 6))
    u = winograd._G @ g @ winograd._G.T
    v = winograd_error.B_T @ d @ winograd_error.B_T.T
    y = winograd_error.A_T @ (u * v) @ winograd_error.A_T.T
    window_sums = [[np.sum(g * d[i:i + 3, j:j + 3]) for j in range(4)] for i in range(4)]
    np.testing.assert_allclose(y, window_sums, rtol=1e-12, atol=1e-12)
    im = d.astype(np.float32)
    got = np.empty(36, np.float32)
    winograd.input_transform(im.ravel(), 1, 6, 6, 0, 0, 1, 1, 0, 1, got)
    bound = gamma(10) * (np.abs(winograd_error.B_T) @ np.abs(im) @
                         np.abs(winograd_error.B_T.T))
    assert_within(got.reshape(6, 6), winograd_error.B_T @ im @ winograd_error.B_T.T, bound,
                  "B^T d B")


def tiles_of(case):
    num, _, _, height, width, pad, _ = case
    return num * np.prod(winograd.tile_counts(height + 2 * pad - 2, width + 2 * pad - 2))


def test_the_threaded_cases_are_past_the_serial_limit():
    for case in KERNEL_CASES[-2:]:
        assert min(case[1], case[2]) * tiles_of(case) >= winograd.PARALLEL_MIN_JOBS


def test_the_blocked_cases_end_in_a_partial_block():
    for case in KERNEL_CASES[-3:-1]:
        per_block = winograd.BLOCK_PAIRS // tiles_of(case)
        assert per_block > 1
        assert case[1] % per_block and case[2] % per_block


def test_kernel_error_on_a_googlenet_sized_layer():
    """96 -> 128 channels at 14x14 (ReLU'd unit-scale input, He-scaled weights): within the
    bound, which is at most MAX_BOUND_RATIO times the GEMM's for these weights."""
    rng = np.random.default_rng(5)
    x = np.maximum(rng.standard_normal((2, 96, 14, 14)), 0).astype(np.float32)
    weights = (rng.standard_normal((128, 96, 3, 3)) * np.sqrt(2 / 864)).astype(np.float32)
    got = run_kernel(x, weights, None, 1, None, 1000)
    want = reference(x, weights, None, 1, None)
    assert_within(got, want, winograd_bound(x, weights, None, 1), "Winograd")
    assert winograd_error.fits(winograd.transform_weights(weights), weights)


def test_weight_transform_is_exact_in_float64():
    """U = G g G^T at the points 0, 1, -1, 1/2, -2: a filter of one 1 at (i, j) transforms
    to the outer product of G's columns i and j."""
    weights = np.zeros((9, 1, 3, 3), np.float32)
    for k in range(9):
        weights[k, 0, k // 3, k % 3] = 1
    u = winograd.transform_weights(weights).reshape(6, 6, 9)
    for k in range(9):
        want = np.outer(winograd._G[:, k // 3], winograd._G[:, k % 3]).astype(np.float32)
        np.testing.assert_array_equal(u[:, :, k], want)


def conv_layer(shape, params, seed=0):
    backend.set_random_seed(seed)
    x = np.random.default_rng(seed + 1).standard_normal(shape)
    text = (f'name: "conv" type: "Convolution" convolution_param {{ '
            f'weight_filler {{ type: "gaussian" std: 0.1 }} '
            f'bias_filler {{ type: "uniform" min: -1 max: 1 }} {params} }}')
    return set_up(text, [x])


WINOGRAD_SHAPE = (2, WINOGRAD_MIN_IN, 16, 16)  # 2 images x 16 tiles
OUT_CHANNELS = 32


def inference_against_forward(layer, bottom, top):
    """(the inference pass's top, the plain forward's top)."""
    layer.forward(bottom, top)
    want = top[0].data.copy()
    layer.inference().forward_pass()(bottom, top)
    return top[0].data, want


def both_ways_bound(layer, bottom, pad=1):
    """How far Winograd's and the GEMM plan's float32 outputs of ``layer`` may lie apart."""
    x, weights = bottom[0].data, layer.blobs[0].data
    bias = layer.blobs[1].data if layer.bias_term else None
    return winograd_bound(x, weights, bias, pad) + gemm_bound(x, weights, bias, pad)


def test_inference_pass_runs_winograd_close_to_the_gemm_plan():
    layer, bottom, top = conv_layer(WINOGRAD_SHAPE, f"num_output: {OUT_CHANNELS} "
                                                    "kernel_size: 3 pad: 1")
    assert layer.winograd_block == 32 and layer.inference().runs_winograd()
    got, want = inference_against_forward(layer, bottom, top)
    assert not np.array_equal(got, want)  # another summation: the pass did run Winograd
    assert_within(got, want, both_ways_bound(layer, bottom), "Winograd against GEMM")


@pytest.mark.parametrize("num", [1, 2])
@pytest.mark.parametrize("out_channels", [1, 8, 12])
def test_few_output_channels_run_winograd(num, out_channels):
    """SSD's box and class heads (a few outputs from many channels) take Winograd at batch 1
    (winograd_image's blocks) and above (winograd.forward), within both ways' bounds."""
    layer, bottom, top = conv_layer((num,) + WINOGRAD_SHAPE[1:],
                                    f"num_output: {out_channels} kernel_size: 3 pad: 1")
    assert layer.winograd_block and layer.inference().runs_winograd()
    got, want = inference_against_forward(layer, bottom, top)
    assert not np.array_equal(got, want)
    assert_within(got, want, both_ways_bound(layer, bottom), "Winograd against GEMM")


def test_weights_whose_bound_is_too_high_run_the_gemm_plan():
    """Filters of one corner tap (shifted copies of the input) amplify most through
    Winograd's transforms: their error bound is above MAX_BOUND_RATIO times the GEMM's, so
    the layer keeps the GEMM plan, to the bit the plain forward; until the weights change."""
    layer, bottom, top = conv_layer(WINOGRAD_SHAPE, f"num_output: {OUT_CHANNELS} "
                                                    "kernel_size: 3 pad: 1")
    corner = np.zeros((3, 3), np.float32)
    corner[0, 2] = 1
    layer.blobs[0].data[...] = corner
    weights = layer.blobs[0].data
    assert winograd_error.bound_ratio(winograd.transform_weights(weights), weights) > \
        winograd_error.MAX_BOUND_RATIO
    assert layer.winograd_block and not layer.inference().runs_winograd()
    got, want = inference_against_forward(layer, bottom, top)
    np.testing.assert_array_equal(got, want)
    layer.blobs[0].data[...] = np.random.default_rng(2).standard_normal(weights.shape)
    assert layer.inference().runs_winograd()


def test_fused_relu_and_a_forced_gemm_plan():
    layer, bottom, top = conv_layer(WINOGRAD_SHAPE, f"num_output: {OUT_CHANNELS} "
                                                    "kernel_size: 3 pad: 1")
    layer.forward(bottom, top)
    want = np.maximum(top[0].data, 0)
    layer.inference().fuse_relu(0.0)
    layer.inference().forward_pass()(bottom, top)
    assert_within(top[0].data, want, both_ways_bound(layer, bottom), "fused ReLU")
    assert top[0].data.min() == 0
    with forced_winograd(False):
        layer.reshape(bottom, top)
        assert layer.winograd_block == 0
        layer.inference().forward_pass()(bottom, top)
        np.testing.assert_array_equal(top[0].data, want)


@pytest.mark.parametrize("params, pad, kernels", [
    ("kernel_size: 3 pad: 1", 1, winograd_image),
    ("kernel_size: 5 pad: 2", 2, conv_image),
    ("kernel_size: 1", 0, conv_image),
])
def test_one_image_runs_in_blocks_of_its_own(params, pad, kernels, monkeypatch):
    """At batch 1 the inference pass runs winograd_image's or conv_image's blocks, and gives
    the plain forward's outputs within both ways' bounds."""
    layer, bottom, top = conv_layer((1, WINOGRAD_MIN_IN, 16, 16),
                                    f"num_output: {OUT_CHANNELS} {params}")
    calls, forward = [], kernels.forward
    monkeypatch.setattr(kernels, "forward", lambda *args: calls.append(1) or forward(*args))
    with forced_winograd(True):
        layer.reshape(bottom, top)
        got, want = inference_against_forward(layer, bottom, top)
    assert calls
    x, weights, bias = bottom[0].data, layer.blobs[0].data, layer.blobs[1].data
    bound = 2 * gemm_bound(x, weights, bias, pad)
    if kernels is winograd_image:
        bound = both_ways_bound(layer, bottom)
    assert_within(got, want, bound, "one image's blocks against the plain forward")


@pytest.mark.parametrize("params, side, image_by_image", [
    ("kernel_size: 5 pad: 2", 48, True),    # 2304 positions an image
    ("kernel_size: 5 pad: 2", 16, False),   # 256: the batch's product
    ("kernel_size: 1", 48, False),          # no window to unfold: the batch's product
    ("kernel_size: 3 stride: 2", 97, True),  # 48 x 48 out of a strided window
])
def test_large_images_run_image_by_image(params, side, image_by_image, monkeypatch):
    """At batch 2 the inference pass runs conv_image image by image where an image has at
    least IMAGE_BY_IMAGE_MIN_POSITIONS output positions and a window to unfold, within the
    GEMM bound of the plain forward either way."""
    from pycaffe_cli.layers.convolution.convolution import IMAGE_BY_IMAGE_MIN_POSITIONS
    layer, bottom, top = conv_layer((2, 4, side, side), f"num_output: 8 {params}")
    assert (layer.out_spatial_dim >= IMAGE_BY_IMAGE_MIN_POSITIONS) == (side > 16)
    calls, forward = [], conv_image.forward
    monkeypatch.setattr(conv_image, "forward", lambda *args: calls.append(1) or forward(*args))
    got, want = inference_against_forward(layer, bottom, top)
    assert bool(calls) == image_by_image
    x, weights, bias = bottom[0].data, layer.blobs[0].data, layer.blobs[1].data
    pad = layer.geometry.pad[0]
    bound = 2 * gemm_bound(x, weights, bias, pad, layer.geometry.stride[0])
    assert_within(got, want, bound, "image by image against the plain forward")


@pytest.mark.parametrize("params", [
    "kernel_size: 3 stride: 2 pad: 1",
    "kernel_size: 3 dilation: 2 pad: 2",
    "kernel_size: 3 pad: 1 group: 2",
    "kernel_size: 5 pad: 2",
    "kernel_h: 3 kernel_w: 1",
])
def test_only_plain_3x3_windows_take_winograd(params):
    layer, bottom, top = conv_layer(WINOGRAD_SHAPE, f"num_output: {OUT_CHANNELS} {params}")
    with forced_winograd(True):
        layer.reshape(bottom, top)
        assert layer.winograd_block == 0


def test_deconvolution_keeps_its_forward():
    layer, bottom, top = set_up(
        'name: "d" type: "Deconvolution" convolution_param { num_output: 32 kernel_size: 3 '
        'pad: 1 }', [np.ones(WINOGRAD_SHAPE)])
    assert layer.inference().forward_pass() == layer.forward_pass()


def test_the_rule_needs_tiles_and_input_channels():
    assert winograd_fits(WINOGRAD_MIN_IN, WINOGRAD_MIN_TILES)
    assert not winograd_fits(WINOGRAD_MIN_IN - 1, 1000)
    assert not winograd_fits(512, WINOGRAD_MIN_TILES - 1)
    layer, bottom, top = conv_layer((1, WINOGRAD_MIN_IN, 8, 8),
                                    f"num_output: {OUT_CHANNELS} kernel_size: 3 pad: 1")
    assert layer.winograd_block == 0  # 4 tiles


def test_blocks_keep_the_scratch_arrays_within_the_column_limit(monkeypatch):
    from pycaffe_cli.layers.convolution import convolution
    monkeypatch.setattr(convolution, "COL_BUFFER_LIMIT",
                        winograd.POINTS * (WINOGRAD_MIN_IN + OUT_CHANNELS) * 5)
    layer, bottom, top = conv_layer(WINOGRAD_SHAPE, f"num_output: {OUT_CHANNELS} "
                                                    "kernel_size: 3 pad: 1")
    assert layer.winograd_block == 5
    got, want = inference_against_forward(layer, bottom, top)
    assert_within(got, want, both_ways_bound(layer, bottom), "blocks of 5 tiles")


def test_the_weight_transform_follows_the_weights():
    layer, bottom, top = conv_layer(WINOGRAD_SHAPE, f"num_output: {OUT_CHANNELS} "
                                                    "kernel_size: 3 pad: 1")
    forward = layer.inference().forward_pass()
    forward(bottom, top)
    layer.blobs[0].data[...] *= 2  # an accessor write: its version moves
    forward(bottom, top)
    doubled = top[0].data.copy()
    layer.forward(bottom, top)
    assert_within(doubled, top[0].data, both_ways_bound(layer, bottom), "doubled weights")
    kept = layer.blobs[0].data
    forward(bottom, top)
    kept[...] = 0  # through an array kept from before: not counted ...
    forward(bottom, top)
    assert np.abs(top[0].data).max() > 0
    layer.inference().forget_weight_transforms()  # ... until the plan's refold says so
    forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, np.broadcast_to(
        layer.blobs[1].data.reshape(1, -1, 1, 1), top[0].shape))


def test_scratch_grows_only_when_winograd_runs():
    """A training net's 3x3 layers keep the GEMM plan's buffers: Winograd's products array
    (2.25 outputs a value) is allocated by the first inference pass."""
    layer, bottom, top = conv_layer(WINOGRAD_SHAPE, f"num_output: {OUT_CHANNELS} "
                                                    "kernel_size: 3 pad: 1")
    layer.forward(bottom, top)
    gemm_size = layer.mat_dim * layer.block
    assert layer.cpu_backend._mat.size == gemm_size
    layer.inference().forward_pass()(bottom, top)
    assert layer.cpu_backend._mat.size == winograd.POINTS * OUT_CHANNELS * 32 > gemm_size
