"""LSTMUnit: forward and backward against a numpy reference (gate order i, f, o, g; cont
masking, saturated gates, propagate_down), gradients to c_prev and the gate inputs, no gradient
to cont, shape errors; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import set_up

UNIT = 'name: "unit" type: "LSTMUnit"'


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def reference(c_prev, x, cont):
    """(c, h) in float64, written out gate by gate."""
    d = c_prev.shape[-1]
    x = x.astype(np.float64).reshape(-1, 4 * d)
    i, f = sigmoid(x[:, :d]), sigmoid(x[:, d:2 * d])
    o, g = sigmoid(x[:, 2 * d:3 * d]), np.tanh(x[:, 3 * d:])
    f = f * cont.reshape(-1, 1)
    c = f * c_prev.reshape(-1, d) + i * g
    h = o * np.tanh(c)
    return c.reshape(c_prev.shape), h.reshape(c_prev.shape)


def inputs(rng, n, d, cont):
    c_prev = rng.normal(size=(1, n, d))
    x = rng.normal(size=(1, n, 4 * d)) * 2
    return [c_prev, x, np.asarray(cont, dtype=np.float32).reshape(1, n)]


def reference_backward(c_prev, x, cont, dc, dh):
    """(dc_prev, dx) in float64 as Caffe computes them: dx_f uses the masked f = cont *
    sigmoid(x_f) (the exact derivative for binary cont)."""
    d = c_prev.shape[-1]
    x = x.astype(np.float64).reshape(-1, 4 * d)
    c_prev, dc, dh = (a.astype(np.float64).reshape(-1, d) for a in (c_prev, dc, dh))
    i, f = sigmoid(x[:, :d]), sigmoid(x[:, d:2 * d]) * cont.reshape(-1, 1)
    o, g = sigmoid(x[:, 2 * d:3 * d]), np.tanh(x[:, 3 * d:])
    tanh_c = np.tanh(f * c_prev + i * g)
    dc_total = dc + dh * o * (1 - tanh_c ** 2)
    dx = np.concatenate([dc_total * g * i * (1 - i), dc_total * c_prev * f * (1 - f),
                         dh * tanh_c * o * (1 - o), dc_total * i * (1 - g ** 2)], axis=1)
    return (dc_total * f).reshape(1, -1, d), dx.reshape(1, -1, 4 * d)


# (n, d, cont, saturated): saturated gates (+-30) in the first stream; a fractional cont
GPU_CASES = [(3, 4, [1, 0, 0.5], True), (2, 1, [0, 0], True), (1, 5, [1], True)]


@pytest.mark.parametrize("engine, n, d, cont, saturated", engine_cases(
    [(3, 4, [1, 1, 1], False), (3, 4, [0, 1, 0], False), (2, 1, [0, 0], False),
     (1, 5, [1], False)] + GPU_CASES, GPU_CASES, unpack=True), indirect=["engine"])
def test_forward_backward_match_reference(engine, n, d, cont, saturated):
    """Forward and backward against numpy, for each pattern of propagate_down (a bottom not
    asked for keeps its diff)."""
    rng = np.random.default_rng(n * 10 + d)
    bottoms = inputs(rng, n, d, cont)
    if saturated:
        bottoms[1][0, 0, :] = [30.0, -30.0] * (2 * d)
    dc, dh = rng.normal(size=(1, n, d)), rng.normal(size=(1, n, d))
    layer, bottom, top = set_up(UNIT, bottoms, num_tops=2)
    assert top[0].shape == top[1].shape == (1, n, d)
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    c, h = reference(*bottoms)
    np.testing.assert_allclose(top[0].cpu_data, c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(top[1].cpu_data, h, rtol=1e-5, atol=1e-6)
    top[0].diff[...] = dc
    top[1].diff[...] = dh
    expected = reference_backward(*bottoms, dc, dh)
    for down in ([True, True, False], [True, False, False], [False, True, False]):
        bottom[0].diff[...] = 42
        bottom[1].diff[...] = 42
        layer.backward(top, down, bottom)
        for blob, want, propagated in zip(bottom, expected, down):
            if propagated:
                np.testing.assert_allclose(blob.cpu_diff, want, rtol=1e-5, atol=1e-6)
            else:
                assert np.all(blob.cpu_diff == 42)


def test_cont_zero_forgets_the_previous_cell():
    bottoms = inputs(np.random.default_rng(0), 2, 3, [0, 0])
    layer, bottom, top = set_up(UNIT, bottoms, num_tops=2)
    layer.forward(bottom, top)
    first = top[0].data.copy()
    bottom[0].data[...] = 1e3  # c_prev no longer matters
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, first)


def test_gate_order_is_i_f_o_g():
    # Saturate one gate at a time: i=1 f=0 o=1 g=tanh(0.5) gives c = tanh(0.5), h = tanh(c)
    big = 30.0
    x = np.array([big, -big, big, 0.5], dtype=np.float32).reshape(1, 1, 4)
    layer, bottom, top = set_up(UNIT, [np.full((1, 1, 1), 7.0), x, np.ones((1, 1))], 2)
    layer.forward(bottom, top)
    assert top[0].data.item() == pytest.approx(np.tanh(0.5), rel=1e-6)
    assert top[1].data.item() == pytest.approx(np.tanh(np.tanh(0.5)), rel=1e-6)


# exhaustive on the CPU; random probes on the GPU (the simulator is slow)
@pytest.mark.parametrize("engine, cont, mode", engine_cases(
    [(cont, "exhaustive") for cont in ([0, 0, 0], [1, 0, 1], [1, 1, 1])],
    [([1, 0, 1], "random")], unpack=True), indirect=["engine"])
def test_gradient(engine, cont, mode):
    bottoms = inputs(np.random.default_rng(3), 3, 2, cont)
    layer, bottom, top = set_up(UNIT, bottoms, num_tops=2)
    check_gradient(layer, bottom, top, check_bottom=[0, 1], threshold=1e-3, mode=mode)


def test_backward_writes_only_the_asked_bottoms(engine):
    bottoms = inputs(np.random.default_rng(4), 2, 2, [1, 1])
    layer, bottom, top = set_up(UNIT, bottoms, num_tops=2)
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    top[1].diff[...] = 1
    bottom[0].diff[...] = 42
    layer.backward(top, [False, True, False], bottom)
    assert np.all(bottom[0].cpu_diff == 42)
    assert np.any(bottom[1].cpu_diff != 0)
    with pytest.raises(CaffeError, match='"unit".*sequence indicators'):
        layer.backward(top, [True, True, True], bottom)


def test_no_gradient_for_cont(engine):
    layer, bottom, top = set_up(UNIT, inputs(np.random.default_rng(5), 2, 2, [1, 1]), 2)
    layer.forward(bottom, top)
    with pytest.raises(CaffeError, match='"unit".*sequence indicators'):
        layer.backward(top, [True, True, True], bottom)
    assert layer.allow_force_backward(0) and layer.allow_force_backward(1)
    assert not layer.allow_force_backward(2)


@pytest.mark.parametrize("shapes, message", [
    (((1, 2, 3), (1, 2, 11), (1, 2)), "4 \\* 3 = 12"),
    (((1, 2, 3), (1, 2, 12), (1, 3)), "bottom\\[2\\]"),
    (((2, 2, 3), (2, 2, 12), (2, 2)), "bottom\\[0\\]"),
    (((1, 2, 3), (1, 2, 12), (1, 2, 1)), "bottom\\[2\\]"),
])
def test_shape_errors_name_the_layer(shapes, message):
    with pytest.raises(CaffeError, match=f'"unit".*{message}'):
        set_up(UNIT, [np.zeros(s) for s in shapes], num_tops=2)
