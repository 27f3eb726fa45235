"""Each update rule against hand-computed steps on a net with constant gradients.

The net is loss = g . w + b (tests/solvers/helpers.py), so dL/dw = g and dL/db = 1. With
G = (1, -2, 0.5), W0 = (0.5, 1, -1), b0 = 0 every step below is worked out by hand.
"""
import math

import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.solvers import create_solver
from tests.solvers.helpers import LogCapture, dot_net, set_input, solver_param, weights

# Every rule runs in CPU mode and in GPU mode (its CUDA kernel, e.g. sgd._sgd_kernel; the test
# layer itself falls back to the CPU, so each step also exercises the host <-> device syncing).
pytestmark = pytest.mark.usefixtures("engine")

G = [1.0, -2.0, 0.5]
W0 = [0.5, 1.0, -1.0]


def make(settings, g=G, w0=W0, lr_mults=None, decay_mults=None, net=None):
    if "base_lr" not in settings:
        settings += " base_lr: 0.1"
    if "lr_policy" not in settings:
        settings += ' lr_policy: "fixed"'
    net_text = net or dot_net(g, w0, 0.0, lr_mults, decay_mults)
    text = f"max_iter: 10 snapshot_after_train: false {settings} net_param {{ {net_text} }}"
    solver = create_solver(solver_param(text))
    if net is None:
        set_input(solver, g)
    return solver


def assert_steps(solver, expected):
    """expected: [(w, b) after step 1, after step 2, ...]."""
    for step, (w, b) in enumerate(expected, 1):
        solver.step(1)
        got_w, got_b = weights(solver)
        np.testing.assert_allclose(got_w, w, rtol=1e-6, atol=1e-7, err_msg=f"w, step {step}")
        np.testing.assert_allclose(got_b, [b], rtol=1e-6, atol=1e-7, err_msg=f"b, step {step}")


def test_sgd_with_momentum():
    # h = 0.9 h + 0.1 g; w -= h.  h1 = 0.1 g, h2 = 0.19 g, h3 = 0.271 g
    assert_steps(make('type: "SGD" momentum: 0.9'), [
        ([0.4, 1.2, -1.05], -0.1),
        ([0.21, 1.58, -1.145], -0.29),
        ([-0.061, 2.122, -1.2805], -0.561)])


def test_sgd_without_momentum_is_plain_gradient_descent():
    assert_steps(make('type: "SGD"'), [([0.4, 1.2, -1.05], -0.1), ([0.3, 1.4, -1.1], -0.2)])


def test_nesterov():
    # h' = 0.9 h + 0.1 g; step = 1.9 h' - 0.9 h: steps 0.19 g, 0.271 g, 0.3439 g
    assert_steps(make('type: "Nesterov" momentum: 0.9'), [
        ([0.31, 1.38, -1.095], -0.19),
        ([0.039, 1.922, -1.2305], -0.461),
        ([-0.3049, 2.6098, -1.40245], -0.8049)])


def test_adagrad():
    # h_t = t g^2; step_t = 0.1 g / (sqrt(t) |g| + 1)   (delta = 1)
    solver = make('type: "AdaGrad" delta: 1')
    g, w = np.array(G), np.array(W0)
    step1 = [0.1 / 2, -0.2 / 3, 0.05 / 1.5]
    step2 = 0.1 * g / (math.sqrt(2) * abs(g) + 1)
    step3 = 0.1 * g / (math.sqrt(3) * abs(g) + 1)
    assert_steps(solver, [
        (w - step1, -0.05),
        (w - step1 - step2, -0.05 - 0.1 / (math.sqrt(2) + 1)),
        (w - step1 - step2 - step3, -0.05 - 0.1 / (math.sqrt(2) + 1) - 0.1 / (math.sqrt(3) + 1))])


def test_rmsprop():
    # rms_decay 0.75: h1 = 0.25 g^2, h2 = 0.4375 g^2, h3 = 0.578125 g^2;
    # step = 0.1 g / (sqrt(h) + 1)
    solver = make('type: "RMSProp" rms_decay: 0.75 delta: 1')
    g = np.array(G)
    step1 = [0.1 / 1.5, -0.2 / 2, 0.05 / 1.25]
    step2 = 0.1 * g / (math.sqrt(0.4375) * abs(g) + 1)
    step3 = 0.1 * g / (math.sqrt(0.578125) * abs(g) + 1)
    b_steps = [0.1 / 1.5, 0.1 / (math.sqrt(0.4375) + 1), 0.1 / (math.sqrt(0.578125) + 1)]
    assert_steps(solver, [
        ([0.5 - 0.1 / 1.5, 1.1, -1.04], -b_steps[0]),
        (W0 - np.array(step1) - step2, -sum(b_steps[:2])),
        (W0 - np.array(step1) - step2 - step3, -sum(b_steps))])


def test_adadelta():
    # momentum 0.5, delta 1, lr 0.5:
    # hg = 0.5 hg + 0.5 g^2; u = g sqrt((hu + 1) / (hg + 1)); hu = 0.5 hu + 0.5 u^2; w -= 0.5 u
    solver = make('type: "AdaDelta" momentum: 0.5 delta: 1 base_lr: 0.5')
    g = np.array(G + [1.0])                      # w's three gradients, then b's
    u1 = g * np.sqrt(1 / (0.5 * g**2 + 1))       # hg1 = 0.5 g^2, hu0 = 0
    hu1 = 0.5 * u1**2
    u2 = g * np.sqrt((hu1 + 1) / (0.75 * g**2 + 1))  # hg2 = 0.75 g^2
    start = np.array(W0 + [0.0])
    after1 = start - 0.5 * u1
    after2 = after1 - 0.5 * u2
    np.testing.assert_allclose(after1, [0.0917517, 1.5773503, -1.2357023, -0.4082483],
                               rtol=1e-6)
    assert_steps(solver, [(after1[:3], after1[3]), (after2[:3], after2[3])])
    assert len(solver.history) == 4              # grad history for w, b; update history


def test_adam_constant_gradient_steps_by_lr_times_sign():
    # m_hat = g and v_hat = g^2 when g is constant, so each step is 0.1 * sign(g)
    assert_steps(make('type: "Adam" momentum: 0.9 momentum2: 0.999'), [
        ([0.4, 1.1, -1.1], -0.1), ([0.3, 1.2, -1.2], -0.2), ([0.2, 1.3, -1.3], -0.3)])


COUNTER_NET = """
name: "counter"
layer { name: "data" type: "SolverTestCounter" top: "g"
        dummy_data_param { shape { dim: 3 } data_filler { value: 1 } } }
layer { name: "dot" type: "SolverTestDot" bottom: "g" top: "loss"
        blobs { shape { dim: 3 } data: 0.5 data: 1 data: -1 } blobs { shape { dim: 1 } data: 0 } }
"""


def test_adam_with_changing_gradient():
    # g1 = 1, g2 = 2 (every element of w): m1 = 0.1, v1 = 0.001; m2 = 0.29, v2 = 0.004999
    solver = make('type: "Adam" momentum: 0.9 momentum2: 0.999', net=COUNTER_NET)
    step1 = 0.1
    step2 = 0.1 * (math.sqrt(1 - 0.999**2) / (1 - 0.9**2)) * 0.29 / (math.sqrt(0.004999) + 1e-8)
    solver.step(2)
    w, b = weights(solver)
    np.testing.assert_allclose(w, np.array(W0) - step1 - step2, rtol=1e-6)
    assert step2 == pytest.approx(0.0965182, rel=1e-6)  # 0.1 * 0.235317 * 0.29 / 0.0707036
    params = len(solver.net.learnable_params)   # history: all m blobs, then all v blobs
    m, v = solver.history[0].cpu_data, solver.history[params].cpu_data
    np.testing.assert_allclose(m, [0.29] * 3, rtol=1e-6)
    b2 = float(np.float32(0.999))                # momentum2 is a float field
    np.testing.assert_allclose(v, [b2 * (1 - b2) + (1 - b2) * 4] * 3, rtol=1e-6)
    np.testing.assert_allclose(v, [0.004999] * 3, rtol=2e-5)


def test_weight_decay_l2_with_lr_and_decay_mults():
    # w: diff = g + 0.1 w, rate 0.1;  b: lr_mult 2, decay_mult 0: diff = 1, rate 0.2
    solver = make('type: "SGD" weight_decay: 0.1', lr_mults=[1, 2], decay_mults=[1, 0])
    assert_steps(solver, [([0.395, 1.19, -1.04], -0.2), ([0.29105, 1.3781, -1.0796], -0.4)])


def test_weight_decay_l1():
    # diff = g + 0.1 sign(w)
    solver = make('type: "SGD" weight_decay: 0.1 regularization_type: "L1"',
                  lr_mults=[1, 1], decay_mults=[1, 0])
    assert_steps(solver, [([0.39, 1.19, -1.04], -0.1), ([0.28, 1.38, -1.08], -0.2)])


def test_weight_decay_applies_before_adaptive_rules():
    # AdaGrad sees g + 0.1 w: for w[0]: 1.05, step 0.1 * 1.05 / (1.05 + 1)
    solver = make('type: "AdaGrad" delta: 1 weight_decay: 0.1')
    solver.step(1)
    assert weights(solver)[0][0] == pytest.approx(0.5 - 0.105 / 2.05, rel=1e-6)


def test_lr_mult_zero_freezes_a_param():
    solver = make('type: "SGD" momentum: 0.9', lr_mults=[1, 0], decay_mults=[1, 1])
    solver.step(2)
    w, b = weights(solver)
    assert b[0] == 0.0
    np.testing.assert_allclose(w, [0.21, 1.58, -1.145], rtol=1e-6)


def test_iter_size_accumulates_and_normalizes():
    # passes see g = 1 then g = 2: accumulated diff 3 -> 1.5; b: 2 -> 1
    solver = make('type: "SGD" iter_size: 2 display: 1', net=COUNTER_NET)
    with LogCapture() as log:
        solver.step(1)
    w, b = weights(solver)
    np.testing.assert_allclose(w, np.array(W0) - 0.15, rtol=1e-6)
    np.testing.assert_allclose(b, [-0.1], rtol=1e-6)
    # loss = (0.5 * 1 + 0.5 * 2) / 2 with sum(W0) = 0.5, b0 = 0
    assert log.matching("Iteration 0 (")[0].endswith("loss = 0.75")


def test_clip_gradients_scales_by_global_norm():
    # ||(2, 2, 4, 1)|| = 5 > 1: every diff scaled by 0.2
    solver = make('type: "SGD" base_lr: 1 clip_gradients: 1', g=[2.0, 2.0, 4.0])
    with LogCapture() as log:
        solver.step(1)
    w, b = weights(solver)
    np.testing.assert_allclose(w, [0.1, 0.6, -1.8], rtol=1e-6)
    np.testing.assert_allclose(b, [-0.2], rtol=1e-6)
    assert ("Gradient clipping: scaling down gradients (L2 norm 5 > 1) by scale factor 0.2"
            in log.messages)


def test_clip_gradients_leaves_small_gradients_alone():
    solver = make('type: "SGD" base_lr: 1 clip_gradients: 10', g=[2.0, 2.0, 4.0])
    with LogCapture() as log:
        solver.step(1)
    np.testing.assert_allclose(weights(solver)[0], [-1.5, -1.0, -5.0])
    assert not log.matching("Gradient clipping")


def test_lr_is_logged_when_display_is_due():
    solver = make('type: "SGD" display: 2 lr_policy: "step" stepsize: 1 gamma: 0.5')
    with LogCapture() as log:
        solver.step(3)
    assert log.matching("Iteration ") and [m for m in log.messages if ", lr = " in m] == [
        "Iteration 0, lr = 0.1", "Iteration 2, lr = 0.025"]


@pytest.mark.parametrize("settings, message", [
    ('type: "AdaGrad" momentum: 0.9', "^momentum: 0.9: Momentum cannot be used with AdaGrad"),
    ('type: "RMSProp" momentum: 0.5', "^momentum: 0.5: Momentum cannot be used with RMSProp"),
    ('type: "RMSProp" rms_decay: 1', "^rms_decay: 1: RMSProp's rms_decay must lie in"),
    ('type: "SGD" weight_decay: 0.1 regularization_type: "L3"',
     '^regularization_type: "L3": Unknown regularization type'),
    ('type: "SGD" iter_size: 0', "^iter_size: 0: iter_size must be >= 1"),
    ('type: "SGD" average_loss: 0', "^average_loss: 0: average_loss must be >= 1"),
])
def test_bad_solver_params_raise(settings, message):
    with pytest.raises(CaffeError, match=message):
        make(settings)
