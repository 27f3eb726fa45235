"""The DIRECT plan on ungrouped layers with tiny windows (LeNet conv1: 1 x 5 x 5 -> 20): the
same numbers as the GEMM plan, gradients, the weight gradient split over image slices, and
which layers choose it (layers/convolution/plan.py: choose_plan's group-1 rule)."""
import numpy as np
import pytest

from pycaffe_cli.layers.convolution.plan import DIRECT_MAX_DEPTH, DIRECT_MAX_ROWS, \
    DIRECT_MIN_BATCH, Plan, choose_plan
from pycaffe_cli.layers.kernels.cpu import depthwise
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import engine_cases
from tests.layer_helpers import set_up
from tests.layers.conv_helpers import forced_plan
from tests.layers.conv_reference import convolve
from tests.layers.test_depthwise_convolution import CONV, DECONV, assert_direct_equals_gemm, \
    layer_text, set_up_case

CASES = [  # layer type, bottom shape, convolution_param (all group 1)
    (CONV, (3, 1, 12, 12), "num_output: 20 kernel_size: 5"),  # LeNet conv1, smaller
    (CONV, (2, 1, 9, 8), "num_output: 8 kernel_size: 3 pad: 1"),
    (CONV, (5, 3, 10, 9), "num_output: 16 kernel_size: 3 pad: 1 stride: 2"),
    (CONV, (2, 2, 11, 10), "num_output: 5 kernel_h: 3 kernel_w: 5 pad_h: 2 pad_w: 1 "
                           "stride_h: 2 stride_w: 3 dilation: 2"),
    (CONV, (4, 1, 7, 7), "num_output: 3 kernel_size: 2 stride: 4 pad: 1 bias_term: false"),
    (CONV, (17, 1, 6, 5), "num_output: 4 kernel_size: 3"),  # slices of 2 and 3 images
    (CONV, (2, 4, 6, 6), "num_output: 7 kernel_size: 1"),
    (CONV, (1, 1, 5, 5), "num_output: 2 kernel_size: 5 pad: 2"),
    (DECONV, (3, 2, 5, 6), "num_output: 1 kernel_size: 3 stride: 2 pad: 1"),
    (DECONV, (2, 6, 4, 4), "num_output: 2 kernel_size: 4 stride: 2 bias_term: false"),
]
GPU_CASES = [CASES[1], CASES[8]]
CASE_IDS = [f"{kind[:6]}-{'x'.join(map(str, shape))}-{i}"
            for i, (kind, shape, _) in enumerate(CASES)]


@pytest.mark.parametrize("engine, case", engine_cases(CASES, GPU_CASES), indirect=["engine"])
def test_forced_direct_equals_gemm(engine, case):
    assert_direct_equals_gemm(case)


@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[3], CASES[5], CASES[8]],
                         ids=[CASE_IDS[i] for i in (0, 2, 3, 5, 8)])
def test_forced_direct_gradients(case):
    layer, bottom, top = set_up_case(*case, seed=3)
    with forced_plan(Plan.DIRECT):
        layer.reshape(bottom, top)
        assert layer.plan is Plan.DIRECT
        check_gradient(layer, bottom, top)


def test_lenet_conv1_runs_direct_and_matches_the_window_sums():
    layer, bottom, top = set_up_case(CONV, (DIRECT_MIN_BATCH, 1, 28, 28),
                                     "num_output: 20 kernel_size: 5")
    assert layer.plan is Plan.DIRECT
    layer.forward(bottom, top)
    expected = convolve(bottom[0].data, layer.blobs[0].data, layer.blobs[1].data, (0, 0),
                        (1, 1), (1, 1), 1)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("num", [1, 2, 7, 64])
@pytest.mark.parametrize("threads", [1, 2])
def test_weight_grad_slices_sum_every_image(num, threads):
    """The group-1 weight gradient, split over up to 4 x threads image slices, is the GEMM
    one's dW += dy @ im2col(x)^T and accumulates into what is there."""
    import numba
    rng = np.random.default_rng(num)
    x = rng.normal(size=(num, 2, 7, 6)).astype(np.float32)
    dy = rng.normal(size=(num, 3, 5, 4)).astype(np.float32)
    weights = rng.normal(size=(3, 2, 3, 3)).astype(np.float32)
    want = np.zeros_like(weights)
    for ki in range(3):
        for kj in range(3):
            want[:, :, ki, kj] = np.einsum("nmhw,nchw->mc", dy, x[:, :, ki:ki + 5, kj:kj + 4])
    diff = np.ones(weights.size, np.float32)
    saved = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        depthwise.weight_grad(x.ravel(), dy.ravel(), num, 2, 7, 6, 3, 3, 0, 0, 1, 1, 1, 1, 3,
                              1, diff)
    finally:
        numba.set_num_threads(saved)
    np.testing.assert_allclose(diff, 1 + want.ravel(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("params, shape, plan", [
    ("num_output: 20 kernel_size: 5", (64, 1, 28, 28), Plan.DIRECT),  # LeNet conv1
    ("num_output: 20 kernel_size: 5", (DIRECT_MIN_BATCH - 1, 1, 28, 28), Plan.GEMM),
    ("num_output: 16 kernel_size: 3 pad: 1", (16, 3, 8, 8), Plan.DIRECT),  # depth 27
    ("num_output: 20 kernel_size: 3", (16, 4, 8, 8), Plan.GEMM),  # depth 36
    ("num_output: 50 kernel_size: 5", (64, 20, 12, 12), Plan.GEMM),  # LeNet conv2
    ("num_output: 64 kernel_size: 3", (16, 1, 8, 8), Plan.GEMM),  # 64 outputs
    ("num_output: 8 kernel_size: 3 force_nd_im2col: true", (16, 1, 8, 8), Plan.GEMM),
])
def test_the_group_1_rule(params, shape, plan):
    layer, _, _ = set_up(layer_text(CONV, params), [np.ones(shape)])
    assert layer.plan is plan


def test_the_plan_follows_the_batch():
    layer, bottom, top = set_up_case(CONV, (1, 1, 8, 8), "num_output: 4 kernel_size: 3")
    assert layer.plan is Plan.GEMM
    bottom[0].reshape((DIRECT_MIN_BATCH, 1, 8, 8))
    layer.reshape(bottom, top)
    assert layer.plan is Plan.DIRECT


def test_deconvolution_keeps_gemm_for_group_1():
    layer, _, _ = set_up_case(DECONV, (DIRECT_MIN_BATCH, 2, 8, 8), "num_output: 1 "
                              "kernel_size: 3")
    assert layer.plan is Plan.GEMM


def test_gpu_mode_keeps_gemm_for_group_1(gpu_mode):
    layer, _, _ = set_up_case(CONV, (DIRECT_MIN_BATCH, 1, 8, 8), "num_output: 4 kernel_size: 3")
    assert layer.plan is Plan.GEMM


def test_choose_plan_group_1_bounds():
    depth, rows, batch = DIRECT_MAX_DEPTH, DIRECT_MAX_ROWS, DIRECT_MIN_BATCH
    assert choose_plan(True, 1, 1, rows, depth, batch) is Plan.DIRECT
    assert choose_plan(True, 1, 2, rows, depth // 2, batch) is Plan.DIRECT
    assert choose_plan(True, 1, 1, rows, depth + 1, batch) is Plan.GEMM
    assert choose_plan(True, 1, 1, rows + 1, depth, batch) is Plan.GEMM
    assert choose_plan(True, 1, 1, rows, depth, batch - 1) is Plan.GEMM
    assert choose_plan(False, 1, 1, 1, 1, batch) is Plan.GEMM
    assert choose_plan(True, 1, 1, 1) is Plan.GEMM  # no batch given: batch 1
