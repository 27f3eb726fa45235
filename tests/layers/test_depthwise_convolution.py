"""The DIRECT (depthwise / small-group) plan of Convolution and Deconvolution: the same numbers
as the GEMM plan, gradients, and which layers choose it."""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.layers.convolution.plan import DIRECT_MAX_IN, DIRECT_MAX_OUT, Plan, \
    choose_plan
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import set_up
from tests.layers.conv_helpers import forced_plan
from tests.layers.conv_reference import convolve
from tests.numerics import close_to


def layer_text(kind, params):
    return (f'name: "dw" type: "{kind}" convolution_param {{ '
            f'weight_filler {{ type: "gaussian" std: 1 }} '
            f'bias_filler {{ type: "uniform" min: -1 max: 1 }} {params} }}')


CONV, DECONV = "Convolution", "Deconvolution"
CASES = [  # layer type, bottom shape, convolution_param
    (CONV, (2, 6, 9, 8), "num_output: 6 group: 6 kernel_size: 3 pad: 1"),
    (CONV, (2, 6, 9, 8), "num_output: 6 group: 6 kernel_size: 3 pad: 1 stride: 2"),
    (CONV, (1, 4, 10, 11), "num_output: 4 group: 4 kernel_size: 3 pad: 2 dilation: 2"),
    (CONV, (3, 4, 9, 10), "num_output: 4 group: 4 kernel_h: 3 kernel_w: 5 pad_h: 1 pad_w: 2 "
                          "stride_h: 2 stride_w: 3"),
    (CONV, (2, 3, 8, 8), "num_output: 3 group: 3 kernel_size: 5 stride: 3 bias_term: false"),
    (CONV, (2, 3, 7, 9), "num_output: 6 group: 3 kernel_size: 3 pad: 1"),  # multiplier 2
    (CONV, (2, 2, 7, 7), "num_output: 8 group: 2 kernel_size: 3 stride: 2 pad: 1 "
                         "dilation: 2"),  # multiplier 4
    (CONV, (2, 8, 6, 7), "num_output: 8 group: 2 kernel_size: 3 pad: 1"),  # groups of 4 x 4
    (CONV, (2, 8, 6, 7), "num_output: 4 group: 4 kernel_h: 2 kernel_w: 3 stride_w: 2 "
                         "bias_term: false"),  # 2 inputs to 1 output per group
    (CONV, (2, 5, 6, 6), "num_output: 5 group: 5 kernel_size: 1"),
    (CONV, (2, 4, 5, 5), "num_output: 4 group: 4 kernel_size: 1 pad: 1 stride: 2"),
    (CONV, (1, 4, 4, 4), "num_output: 4 group: 4 kernel_size: 3 pad: 3"),  # pad > window
    (CONV, (2, 4, 7, 7), "num_output: 4 group: 4 kernel_size: 2 stride: 4 pad: 1"),  # gaps
    (CONV, (5, 3, 6, 5), "num_output: 3 group: 3 kernel_size: 3 pad: 1 dilation: 2 "
                         "stride: 2"),
    (CONV, (2, 3, 4, 5, 6), "num_output: 4 group: 4 kernel_size: 3 pad: 1 axis: 2"),
    (DECONV, (2, 4, 5, 6), "num_output: 4 group: 4 kernel_size: 3 pad: 1 stride: 2"),
    (DECONV, (2, 4, 4, 5), "num_output: 8 group: 4 kernel_h: 4 kernel_w: 3 stride: 2 "
                           "pad: 1"),
    (DECONV, (2, 6, 4, 4), "num_output: 3 group: 3 kernel_size: 3 dilation: 2 "
                           "bias_term: false"),
]
GPU_CASES = [CASES[1], CASES[3], CASES[6], CASES[8], CASES[15]]
CASE_IDS = [f"{kind[:6]}-{'x'.join(map(str, shape))}-{i}"
            for i, (kind, shape, _) in enumerate(CASES)]


def set_up_case(kind, shape, params, seed=0):
    backend.set_random_seed(seed)
    x = np.random.default_rng(seed + 1).normal(size=shape)
    return set_up(layer_text(kind, params), [x])


def run_plan(layer, bottom, top, plan, dy):
    """Forward and backward with ``plan`` forced; (top, bottom diff, param diffs)."""
    with forced_plan(plan):
        layer.forward(bottom, top)
        assert layer.plan is plan
        assert_tops_on_device(layer, top)
        y = top[0].cpu_data.copy()
        top[0].diff[...] = dy
        for blob in layer.blobs:
            blob.diff[...] = 0
        layer.backward(top, [True], bottom)
        return [y, bottom[0].cpu_diff.copy()] + [blob.cpu_diff.copy() for blob in layer.blobs]


def assert_close(got, want, what):
    """Within 1e-5 of the largest magnitude (at least 1): float32 sums in another order."""
    scale = max(float(np.abs(want).max(initial=0.0)), 1.0)
    assert np.abs(got - want).max(initial=0.0) <= 1e-5 * scale, what


def assert_direct_equals_gemm(case):
    """The layer of ``case`` gives the same top and diffs with either plan forced."""
    layer, bottom, top = set_up_case(*case)
    dy = np.random.default_rng(7).normal(size=top[0].shape)
    gemm = run_plan(layer, bottom, top, Plan.GEMM, dy)
    direct = run_plan(layer, bottom, top, Plan.DIRECT, dy)
    for what, got, want in zip(["top", "bottom diff", "weight diff", "bias diff"], direct,
                               gemm):
        assert_close(got, want, what)


@pytest.mark.parametrize("engine, case", engine_cases(CASES, GPU_CASES), indirect=["engine"])
def test_direct_plan_equals_gemm_plan(engine, case):
    assert_direct_equals_gemm(case)


@pytest.mark.parametrize("engine, case", engine_cases(CASES[:9] + CASES[13:], GPU_CASES[:3]),
                         indirect=["engine"])
def test_direct_plan_gradients(engine, case):
    layer, bottom, top = set_up_case(*case, seed=3)
    assert layer.plan is Plan.DIRECT
    check_gradient(layer, bottom, top)


def test_forward_against_naive_window_sums():
    layer, bottom, top = set_up_case(CONV, (2, 3, 8, 7), "num_output: 6 group: 3 kernel_h: 3 "
                                     "kernel_w: 2 pad: 1 stride: 2 dilation: 2")
    assert layer.plan is Plan.DIRECT
    layer.forward(bottom, top)
    expected = convolve(bottom[0].data, layer.blobs[0].data, layer.blobs[1].data, (1, 1),
                        (2, 2), (2, 2), 3)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("params, shape, plan", [
    ("num_output: 32 group: 32 kernel_size: 3 pad: 1", (1, 32, 8, 8), Plan.DIRECT),
    ("num_output: 64 group: 32 kernel_size: 3 pad: 1 stride: 2", (1, 32, 8, 8), Plan.DIRECT),
    ("num_output: 16 group: 16 kernel_size: 1", (1, 16, 4, 4), Plan.DIRECT),
    ("num_output: 8 group: 1 kernel_size: 3", (1, 1, 6, 6), Plan.GEMM),  # one group
    ("num_output: 32 group: 2 kernel_size: 3", (1, 32, 6, 6), Plan.GEMM),  # 16 outputs a group
    ("num_output: 8 group: 4 kernel_size: 3 force_nd_im2col: true", (1, 8, 6, 6), Plan.GEMM),
    ("num_output: 4 group: 4 kernel_size: 3", (1, 4, 4, 4, 4), Plan.GEMM),  # 3-d window
])
def test_the_plan_is_chosen_per_layer(params, shape, plan):
    layer, _, _ = set_up(layer_text(CONV, params), [np.ones(shape)])
    assert layer.plan is plan


def test_depthwise_deconvolution_runs_direct():
    layer, _, _ = set_up_case(DECONV, (1, 8, 4, 4), "num_output: 8 group: 8 kernel_size: 4 "
                              "stride: 2 pad: 1")
    assert layer.plan is Plan.DIRECT


def test_choose_plan_bounds():
    assert choose_plan(True, 4, DIRECT_MAX_IN, DIRECT_MAX_OUT) is Plan.DIRECT
    assert choose_plan(True, 4, DIRECT_MAX_IN + 1, 1) is Plan.GEMM
    assert choose_plan(True, 4, 1, DIRECT_MAX_OUT + 1) is Plan.GEMM
    assert choose_plan(True, 1, 1, 1) is Plan.GEMM
    assert choose_plan(False, 4, 1, 1) is Plan.GEMM


def test_forcing_direct_on_nd_windows_keeps_gemm():
    layer, bottom, top = set_up_case(CONV, (1, 4, 4, 4, 4), "num_output: 4 group: 4 "
                                     "kernel_size: 3")
    with forced_plan(Plan.DIRECT):
        layer.forward(bottom, top)
        assert layer.plan is Plan.GEMM


def test_forcing_the_plan_back_and_forth_reshapes(monkeypatch):
    import pycaffe_cli.layers.convolution.base as base
    monkeypatch.setattr(base, "COL_BUFFER_LIMIT", 4 * 9 * 9)  # one image per GEMM block
    layer, bottom, top = set_up_case(CONV, (3, 4, 5, 5), "num_output: 4 group: 4 "
                                     "kernel_size: 3 pad: 1")
    assert layer.blocks() == [(0, 3)]  # the DIRECT plan takes the batch in one block
    with forced_plan(Plan.GEMM):
        layer.forward(bottom, top)
        assert layer.blocks() == [(0, 1), (1, 1), (2, 1)]
        gemm = top[0].data.copy()
    layer.forward(bottom, top)
    assert layer.plan is Plan.DIRECT
    assert_close(top[0].data, gemm, "top")


def test_direct_param_gradients_accumulate_and_frozen_ones_are_skipped():
    layer, bottom, top = set_up_case(CONV, (2, 3, 4, 4), "num_output: 3 group: 3 "
                                     "kernel_size: 3")
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    layer.backward(top, [False], bottom)
    once = [b.diff.copy() for b in layer.blobs]
    np.testing.assert_allclose(once[1], [8, 8, 8])  # 2 images x 2 x 2 outputs
    layer.backward(top, [False], bottom)
    for blob, first in zip(layer.blobs, once):
        close_to(blob.diff, 2 * first, rtol=1e-6)
    np.testing.assert_array_equal(bottom[0].diff, 0)
    layer.param_propagate_down = [False, False]
    layer.backward(top, [True], bottom)
    close_to(layer.blobs[0].diff, 2 * once[0], rtol=1e-6)
    assert np.abs(bottom[0].diff).sum() > 0


@pytest.mark.parametrize("case", GPU_CASES[:2])
def test_cpu_and_gpu_direct_plans_agree(case):
    from tests.gpu_helpers import compare_layer_modes
    kind, shape, params = case
    x = np.random.default_rng(1).normal(size=shape)
    backend.set_random_seed(0)
    out = compare_layer_modes(layer_text(kind, params), [x])[0]
    dy = np.random.default_rng(2).normal(size=out[0].shape)
    backend.set_random_seed(0)
    compare_layer_modes(layer_text(kind, params), [x], top_diffs=[dy], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("slope", [0.0, 0.1])
def test_direct_forward_fuses_the_relu_to_the_bit(slope):
    """The inference plan's fused ReLU (negative slope ``slope``) on the DIRECT kernel's
    output: what a separate ReLU pass after bias gives, bit for bit (-0.0 and NaN too)."""
    from pycaffe_cli.layers.kernels.cpu import depthwise
    from pycaffe_cli.layers.kernels.cpu.layout import add_channel_bias_relu
    rng = np.random.default_rng(7)
    num, channels, size = 2, 6, 9
    im = rng.standard_normal(num * channels * size * size).astype(np.float32)
    im[5] = np.nan
    weights = rng.standard_normal(channels * 9).astype(np.float32)
    bias = rng.standard_normal(channels).astype(np.float32)
    geometry = (channels, size, size, 3, 3, 1, 1, 2, 2, 1, 1)
    out = np.empty(num * channels * 5 * 5, np.float32)
    depthwise.forward(im, num, *geometry, weights, channels, channels, None, out)
    add_channel_bias_relu(out, num, channels, 25, bias, np.float32(slope))
    fused = np.empty_like(out)
    depthwise.forward(im, num, *geometry, weights, channels, channels, bias, fused, slope)
    np.testing.assert_array_equal(fused.view(np.uint32), out.view(np.uint32))


def nine_taps_in_order(im, num, channels, height, width, stride, weights, bias, slope):
    """A 3x3, pad 1 depthwise forward in numpy float32, each output's terms summed from 0 in
    tap order (the padding's as w * 0), then bias, then ReLU: the order of the DIRECT
    kernel's general pass (and of the GEMM plan's product)."""
    padded = np.zeros((num, channels, height + 2, width + 2), np.float32)
    padded[:, :, 1:-1, 1:-1] = im.reshape(num, channels, height, width)
    out_h, out_w = (height - 1) // stride + 1, (width - 1) // stride + 1
    w = weights.reshape(1, channels, 9, 1, 1)
    total = np.zeros((num, channels, out_h, out_w), np.float32)
    for t in range(9):
        ki, kj = divmod(t, 3)
        window = padded[:, :, ki:ki + stride * out_h:stride, kj:kj + stride * out_w:stride]
        total = total + w[:, :, t] * window
    total = total + bias.reshape(1, channels, 1, 1)
    if slope is not None:
        total = np.where(total > 0, total, total * np.float32(slope)) if slope else \
            np.where(total <= 0, np.float32(0), total)
    return total.reshape(-1)


@pytest.mark.parametrize("slope", [None, 0.0, 0.1])
@pytest.mark.parametrize("width, stride", [(70, 1), (70, 2), (12, 1), (12, 2)])
def test_depthwise_3x3_sums_its_nine_taps_in_order(width, stride, slope):
    """Depthwise 3x3 layers sum their nine taps in one pass, row by row into the output
    where rows are wide (ROWS_MIN_WIDTH), over the grid otherwise: each output the bits of
    the general pass's order (taps from 0 in order, padding as w * 0, then bias, then the
    fused ReLU), NaN, infinities and signed zeros included."""
    from pycaffe_cli.layers.kernels.cpu import depthwise
    from pycaffe_cli.layers.kernels.cpu.depthwise.forward import ROWS_MIN_WIDTH
    out_w = (width - 1) // stride + 1
    assert (out_w >= ROWS_MIN_WIDTH) == (width == 70)  # both passes are covered
    rng = np.random.default_rng(5)
    num, channels, height = 2, 5, 9
    im = rng.standard_normal(num * channels * height * width).astype(np.float32)
    im[[3, 40, 77]] = [np.nan, np.inf, -0.0]
    weights = rng.standard_normal(channels * 9).astype(np.float32)
    weights[10] = -0.0
    bias = rng.standard_normal(channels).astype(np.float32)
    out = np.empty(num * channels * ((height - 1) // stride + 1) * out_w, np.float32)
    depthwise.forward(im, num, channels, height, width, 3, 3, 1, 1, stride, stride, 1, 1,
                      weights, channels, channels, bias, out, slope)
    want = nine_taps_in_order(im, num, channels, height, width, stride, weights, bias, slope)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))


FUSED_GEOMETRIES = [  # num, (channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
    # stride_h, stride_w, dilation_h, dilation_w), out_channels, group, out_h, out_w
    (64, (1, 28, 28, 5, 5, 0, 0, 1, 1, 1, 1), 20, 1, 24, 24),  # LeNet conv1
    (5, (6, 11, 10, 3, 2, 2, 1, 2, 3, 2, 1), 12, 3, 6, 4),
    (1, (4, 60, 70, 3, 3, 1, 1, 1, 1, 1, 1), 4, 4, 60, 70),  # a grid longer than CHUNK
]


@pytest.mark.parametrize("wanted", [(True, True, True), (True, False, False),
                                    (False, True, False), (False, False, True),
                                    (True, False, True), (False, True, True)])
@pytest.mark.parametrize("case", FUSED_GEOMETRIES)
def test_fused_backward_gives_the_bits_of_separate_passes(case, wanted):
    """``depthwise.backward`` computes each wanted gradient in one pass over the top diff:
    the bits of ``weight_grad``, ``backward_data`` and the bias sums run one by one, and it
    leaves the arrays it is not given alone."""
    from pycaffe_cli.layers.kernels.cpu import depthwise
    from pycaffe_cli.layers.kernels.cpu.layout import channel_sums
    num, geometry, out_channels, group, out_h, out_w = case
    channels, height, width, kernel_h, kernel_w = geometry[:5]
    rng = np.random.default_rng(11)
    im = rng.standard_normal(num * channels * height * width).astype(np.float32)
    out = rng.standard_normal(num * out_channels * out_h * out_w).astype(np.float32)
    weights = rng.standard_normal(out_channels * channels // group * kernel_h
                                  * kernel_w).astype(np.float32)
    start = [rng.standard_normal(weights.size).astype(np.float32),
             rng.standard_normal(im.size).astype(np.float32),
             rng.standard_normal(out_channels).astype(np.float32)]
    want = [a.copy() for a in start]
    depthwise.weight_grad(im, out, num, *geometry, out_channels, group, want[0])
    depthwise.backward_data(out, num, *geometry, weights, out_channels, group, want[1])
    sums = np.zeros(out_channels, np.float32)
    channel_sums(out, num, out_channels, out_h * out_w, sums)
    want[2] += sums
    got = [a.copy() for a in start]
    depthwise.backward(im, out, num, *geometry, weights, out_channels, group,
                       *[g if w else None for g, w in zip(got, wanted)])
    for g, w, s, given in zip(got, want, start, wanted):
        np.testing.assert_array_equal(g.view(np.uint32), (w if given else s).view(np.uint32))


@pytest.mark.parametrize("weights_down, bias_down, data_down",
                         [(True, False, False), (False, True, False), (False, False, True),
                          (False, False, False), (True, True, False)])
def test_direct_backward_computes_only_what_is_asked(weights_down, bias_down, data_down):
    """Convolution's one-pass DIRECT backward (LeNet's conv1 plan, and depthwise) writes
    the weight, bias and bottom diffs only where ``param_propagate_down`` and
    ``propagate_down`` ask, with the GEMM plan's numbers there (7 stands in the others)."""
    for case in [(CONV, (17, 1, 12, 12), "num_output: 6 kernel_size: 5"), CASES[5]]:
        layer, bottom, top = set_up_case(*case)
        dy = np.random.default_rng(5).normal(size=top[0].shape)
        want = run_plan(layer, bottom, top, Plan.GEMM, dy)
        with forced_plan(Plan.DIRECT):
            layer.forward(bottom, top)
            assert layer.plan is Plan.DIRECT
        layer.param_propagate_down = [weights_down, bias_down]
        top[0].diff[...] = dy
        bottom[0].diff[...] = 7
        for blob in layer.blobs:
            blob.diff[...] = 7
        layer.backward(top, [data_down], bottom)
        # The bottom diff is written, the parameters' diffs are added to.
        got = [bottom[0].diff, layer.blobs[0].diff - 7, layer.blobs[1].diff - 7]
        for given, g, w, what in zip([data_down, weights_down, bias_down], got, want[1:],
                                     ["bottom", "weight", "bias"]):
            if given:
                assert_close(g, w, what)
            else:
                assert (g == (7 if what == "bottom" else 0)).all(), what
