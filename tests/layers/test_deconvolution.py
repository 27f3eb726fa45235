"""Deconvolution: forward against a naive scatter, the adjoint of Convolution, gradients."""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.convolution.plan import Plan
from pycaffe_cli.testing import check_gradient
from tests.layer_helpers import set_up
from tests.layers.conv_helpers import forced_plan
from tests.layers.conv_reference import CASES_2D, case_params, deconvolve


def deconv(params, blobs="", kind="Deconvolution"):
    return (f'name: "deconv" type: "{kind}" convolution_param {{ '
            f'weight_filler {{ type: "gaussian" std: 1 }} '
            f'bias_filler {{ type: "uniform" min: -1 max: 1 }} {params} }} {blobs}')


def output_size(size, kernel, pad, stride, dilation):
    return stride * (size - 1) + dilation * (kernel - 1) + 1 - 2 * pad


@pytest.mark.parametrize("kernel, pad, stride, dilation, group, bias", CASES_2D)
def test_forward_2d(kernel, pad, stride, dilation, group, bias):
    text, k = case_params(kernel, pad, stride, dilation, group, bias, 6)
    backend.set_random_seed(0)
    x = np.random.default_rng(1).normal(size=(2, 4, 3, 4))
    layer, bottom, top = set_up(deconv(text), [x])
    assert layer.blobs[0].shape == (4, 6 // group) + k
    assert top[0].shape == (2, 6) + tuple(output_size(s, kk, pad, stride, dilation)
                                          for s, kk in zip((3, 4), k))
    layer.forward(bottom, top)
    b = layer.blobs[1].data if bias else None
    expected = deconvolve(bottom[0].data, layer.blobs[0].data, b, (pad,) * 2, (stride,) * 2,
                          (dilation,) * 2, group)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-5)


# Groups of 3 x 2 channels run the DIRECT plan (layers/convolution/plan.py); the GEMM plan,
# forced.
@pytest.mark.parametrize("kernel, pad, stride, dilation, group, bias",
                         [case for case in CASES_2D if case[4] > 1])
def test_grouped_gemm_plan_forward_2d(kernel, pad, stride, dilation, group, bias):
    text, _ = case_params(kernel, pad, stride, dilation, group, bias, 6)
    backend.set_random_seed(0)
    x = np.random.default_rng(1).normal(size=(2, 4, 3, 4))
    layer, bottom, top = set_up(deconv(text), [x])
    assert layer.plan is Plan.DIRECT
    with forced_plan(Plan.GEMM):
        layer.forward(bottom, top)
        assert layer.plan is Plan.GEMM
        expected = deconvolve(bottom[0].data, layer.blobs[0].data,
                              layer.blobs[1].data if bias else None, (pad,) * 2, (stride,) * 2,
                              (dilation,) * 2, group)
        np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-5)
        if kernel == "k3" and bias:
            check_gradient(layer, bottom, top)


@pytest.mark.parametrize("kernel, pad, stride, dilation, group, bias", CASES_2D)
def test_gradient_2d(kernel, pad, stride, dilation, group, bias):
    text, _ = case_params(kernel, pad, stride, dilation, group, bias, 6)
    backend.set_random_seed(0)
    x = np.random.default_rng(2).normal(size=(2, 4, 3, 4))
    layer, bottom, top = set_up(deconv(text), [x])
    check_gradient(layer, bottom, top)


ADJOINT_CASES = [  # input shape, params (num_output = input channels of the conv)
    ((2, 4, 7, 5), "kernel_size: 3 pad: 1 stride: 2 group: 2"),
    ((2, 4, 9, 7), "kernel_h: 3 kernel_w: 2 stride: 2 dilation: 2"),
    ((2, 2, 5, 6), "kernel_size: 1"),
    ((2, 4, 5, 4, 5), "kernel_size: 3 kernel_size: 2 kernel_size: 3 pad: 1 stride: 2 group: 2"),
]


@pytest.mark.parametrize("shape, params", ADJOINT_CASES)
def test_forward_is_the_transpose_of_convolution(shape, params):
    # <conv(x), y> = <x, deconv(y)> with the same weights, geometry and no bias.
    rng = np.random.default_rng(3)
    common = f"{params} num_output: {{}} bias_term: false"
    backend.set_random_seed(0)
    x = rng.normal(size=shape)
    conv, cb, ct = set_up(deconv(common.format(3 * 2), kind="Convolution"), [x])
    conv.forward(cb, ct)
    y = rng.normal(size=ct[0].shape)
    blob = conv.blobs[0]
    weights = (f"blobs {{ shape {{ {' '.join(f'dim: {d}' for d in blob.shape)} }} "
               + " ".join(f"data: {v!r}" for v in blob.data.ravel().tolist()) + " }")
    dec, db, dt = set_up(deconv(common.format(shape[1]), weights), [y])
    dec.forward(db, dt)
    assert dt[0].shape == shape
    lhs = np.dot(ct[0].data.ravel().astype(np.float64), db[0].data.ravel())
    rhs = np.dot(cb[0].data.ravel().astype(np.float64), dt[0].data.ravel())
    # sums of signed terms: abs is rel times the data's scale, the largest term
    scale = np.abs(cb[0].data.ravel().astype(np.float64) * dt[0].data.ravel()).max()
    assert lhs == pytest.approx(rhs, rel=1e-5, abs=1e-5 * scale)


def test_nd_forward_and_gradient():
    backend.set_random_seed(0)
    x = np.random.default_rng(4).normal(size=(2, 4, 3, 2, 3))
    params = ("kernel_size: 2 kernel_size: 3 kernel_size: 2 stride: 2 stride: 1 stride: 2 "
              "pad: 1 pad: 0 pad: 0 dilation: 1 dilation: 1 dilation: 2 group: 2 num_output: 2")
    layer, bottom, top = set_up(deconv(params), [x])
    layer.forward(bottom, top)
    expected = deconvolve(x, layer.blobs[0].data, layer.blobs[1].data, (1, 0, 0), (2, 1, 2),
                          (1, 1, 2), 2)
    assert top[0].shape == (2, 2, 4, 4, 7)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-5)
    check_gradient(layer, bottom, top)


def test_large_batches_run_in_blocks(monkeypatch):
    import pycaffe_cli.layers.convolution.base as base
    backend.set_random_seed(0)
    x = np.random.default_rng(5).normal(size=(3, 2, 3, 3))
    monkeypatch.setattr(base, "COL_BUFFER_LIMIT", 2 * 27 * 9)   # two images per block
    layer, bottom, top = set_up(deconv("kernel_size: 3 stride: 2 num_output: 3"), [x])
    assert layer.blocks() == [(0, 2), (2, 1)]
    layer.forward(bottom, top)
    expected = deconvolve(x, layer.blobs[0].data, layer.blobs[1].data, (0, 0), (2, 2), (1, 1),
                          1)
    np.testing.assert_allclose(top[0].cpu_data, expected, rtol=1e-5, atol=1e-5)
    check_gradient(layer, bottom, top)


def test_hand_computed_upsampling():
    # A 2x2 all-ones filter with stride 2 copies each input pixel into a 2x2 block.
    blobs = "blobs { shape { dim: 1 dim: 1 dim: 2 dim: 2 } data: 1 data: 1 data: 1 data: 1 }"
    layer, bottom, top = set_up(deconv("kernel_size: 2 stride: 2 num_output: 1 "
                                       "bias_term: false", blobs), [np.array([[[[1, 2], [3, 4]]]])])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data[0, 0], [[1, 1, 2, 2], [1, 1, 2, 2],
                                                      [3, 3, 4, 4], [3, 3, 4, 4]])


@pytest.mark.parametrize("params, shape, message", [
    ("kernel_size: 3 num_output: 3 group: 2", (2, 4, 5, 5), "should be multiples of group"),
    ("kernel_size: 3 num_output: 4 group: 2", (2, 3, 5, 5), "not divisible by group 2"),
    ("kernel_size: 3 pad: 3 num_output: 2", (2, 3, 2, 2), "does not fit"),
    ("num_output: 2", (2, 3, 5, 5), "kernel size must be specified"),
])
def test_setup_errors(params, shape, message):
    with pytest.raises(CaffeError, match=f'"deconv".*{message}'):
        set_up(deconv(params), [np.ones(shape)])


def test_weight_shape_is_reversed():
    blobs = "blobs { shape { dim: 6 dim: 3 dim: 3 dim: 3 } } blobs { shape { dim: 6 } }"
    with pytest.raises(CaffeError, match=r'"deconv".*Incorrect weight shape: expected shape '
                                         r'3 6 3 3'):
        set_up(deconv("kernel_size: 3 num_output: 6", blobs), [np.ones((1, 3, 5, 5))])


# --- GPU mode (the CUDA simulator in CI) ------------------------------------------------------
# CASES_2D[::9] starts with a 1x1 window (the pure-GEMM path); CASES_2D[3] is a grouped one.
@pytest.mark.parametrize("kernel, pad, stride, dilation, group, bias",
                         CASES_2D[::9] + [CASES_2D[3]])
def test_cpu_and_gpu_agree(kernel, pad, stride, dilation, group, bias):
    from tests.gpu_helpers import compare_layer_modes
    text, _ = case_params(kernel, pad, stride, dilation, group, bias, 6)
    x = np.random.default_rng(1).normal(size=(2, 4, 3, 4))
    backend.set_random_seed(0)
    out = compare_layer_modes(deconv(text), [x])[0]
    dy = np.random.default_rng(2).normal(size=out[0].shape)
    backend.set_random_seed(0)
    compare_layer_modes(deconv(text), [x], top_diffs=[dy], rtol=1e-4, atol=1e-4)


def test_gradient_with_groups(engine):
    backend.set_random_seed(0)
    x = np.random.default_rng(3).normal(size=(2, 4, 3, 3))
    layer, bottom, top = set_up(deconv("kernel_size: 3 stride: 2 pad: 1 group: 2 "
                                       "num_output: 4"), [x])
    check_gradient(layer, bottom, top)
