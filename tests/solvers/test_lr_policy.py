"""Learning-rate policies against hand-computed values, and the multistep bookkeeping."""
import math

import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.solvers import create_solver, lr_policy
from tests.solvers.helpers import LogCapture, dot_net, set_input, solver_param

BASE = "base_lr: 0.1 "


@pytest.mark.parametrize("settings, iteration, expected", [
    ('lr_policy: "fixed"', 0, 0.1),
    ('lr_policy: "fixed"', 1000, 0.1),
    # step: 0.1 * 0.5 ^ floor(iter / 3)
    ('lr_policy: "step" gamma: 0.5 stepsize: 3', 0, 0.1),
    ('lr_policy: "step" gamma: 0.5 stepsize: 3', 2, 0.1),
    ('lr_policy: "step" gamma: 0.5 stepsize: 3', 3, 0.05),
    ('lr_policy: "step" gamma: 0.5 stepsize: 3', 7, 0.025),
    # exp: 0.1 * 0.5 ^ iter
    ('lr_policy: "exp" gamma: 0.5', 0, 0.1),
    ('lr_policy: "exp" gamma: 0.5', 3, 0.0125),
    # inv: 0.1 * (1 + 1 * iter) ^ -2
    ('lr_policy: "inv" gamma: 1 power: 2', 0, 0.1),
    ('lr_policy: "inv" gamma: 1 power: 2', 1, 0.025),
    ('lr_policy: "inv" gamma: 1 power: 2', 3, 0.00625),
    # multistep: 0.1 * 0.1 ^ (number of stepvalues <= iter), stepvalues 2, 5
    ('lr_policy: "multistep" gamma: 0.1 stepvalue: 2 stepvalue: 5', 1, 0.1),
    ('lr_policy: "multistep" gamma: 0.1 stepvalue: 2 stepvalue: 5', 2, 0.01),
    ('lr_policy: "multistep" gamma: 0.1 stepvalue: 2 stepvalue: 5', 4, 0.01),
    ('lr_policy: "multistep" gamma: 0.1 stepvalue: 2 stepvalue: 5', 5, 0.001),
    ('lr_policy: "multistep" gamma: 0.1 stepvalue: 2 stepvalue: 5', 50, 0.001),
    # poly: 0.1 * (1 - iter / 10) ^ 2
    ('lr_policy: "poly" power: 2 max_iter: 10', 0, 0.1),
    ('lr_policy: "poly" power: 2 max_iter: 10', 5, 0.025),
    ('lr_policy: "poly" power: 2 max_iter: 10', 8, 0.004),
    ('lr_policy: "poly" power: 2 max_iter: 10', 10, 0.0),
    # sigmoid: 0.1 / (1 + exp(-1 * (iter - 5)))
    ('lr_policy: "sigmoid" gamma: 1 stepsize: 5', 5, 0.05),
    ('lr_policy: "sigmoid" gamma: 1 stepsize: 5', 0, 0.1 / (1 + math.exp(5))),
    ('lr_policy: "sigmoid" gamma: 1 stepsize: 5', 7, 0.1 / (1 + math.exp(-2))),
])
def test_policy_values(settings, iteration, expected):
    rate = lr_policy.learning_rate(solver_param(BASE + settings), iteration)
    assert rate == pytest.approx(expected, rel=1e-6, abs=1e-12)


def test_every_policy_has_its_formula_in_the_docstring():
    for name, function in lr_policy.POLICIES.items():
        assert "lr =" in function.__doc__, name
    assert sorted(lr_policy.POLICIES) == ["exp", "fixed", "inv", "multistep", "poly",
                                          "sigmoid", "step"]


def test_rate_is_a_float32_value():
    rate = lr_policy.learning_rate(solver_param('base_lr: 0.01 lr_policy: "fixed"'), 0)
    assert rate == 0.009999999776482582


@pytest.mark.parametrize("settings, message", [
    ('lr_policy: "cosine"', 'Unknown learning rate policy: "cosine" \\(known policies: exp, '
                            'fixed, inv, multistep, plateau, poly, sigmoid, step\\)'),
    ("", 'Unknown learning rate policy: ""'),
    ('lr_policy: "step" gamma: 0.5', "needs stepsize > 0"),
    ('lr_policy: "sigmoid" gamma: 0.5', "needs stepsize > 0"),
    ('lr_policy: "exp" gamma: -1', "needs gamma >= 0"),
    ('lr_policy: "poly" power: 1', "needs max_iter > 0"),
    ('lr_policy: "multistep" gamma: 0.1 stepvalue: 5 stepvalue: 5', "strictly increasing"),
    ('lr_policy: "inv" gamma: -0.5 power: 1', "^gamma: -0.5: lr_policy \"inv\" needs gamma >= 0"),
])
def test_bad_policies_raise(settings, message):
    with pytest.raises(CaffeError, match=message):
        lr_policy.learning_rate(solver_param(BASE + settings), 0)


@pytest.mark.parametrize("settings, iteration, expected", [
    # C's pow and exp, which Caffe calls, where Python's math module raises
    ('lr_policy: "exp" gamma: 1.5', 2000, math.inf),             # pow overflows
    ('lr_policy: "step" gamma: 1e30 stepsize: 1', 20, math.inf),
    ('lr_policy: "sigmoid" gamma: 1 stepsize: 1000', 0, 0.0),    # exp(1000) overflows
    ('lr_policy: "poly" power: 0.5 max_iter: 10', 11, math.nan),  # (1 - 1.1) ^ 0.5
    ('lr_policy: "poly" power: -1 max_iter: 10', 10, math.inf),   # 0 ^ -1
])
def test_rates_past_double_are_what_c_gives(settings, iteration, expected):
    rate = lr_policy.learning_rate(solver_param(BASE + settings), iteration)
    assert rate == expected or (math.isnan(expected) and math.isnan(rate))


def test_unknown_policy_is_rejected_when_the_solver_is_built():
    text = f'base_lr: 0.1 lr_policy: "warmup" net_param {{ {dot_net([1], [1])} }}'
    with pytest.raises(CaffeError, match="Unknown learning rate policy"):
        create_solver(solver_param(text))


def test_multistep_logs_each_step_and_tracks_current_step():
    text = ('base_lr: 1 lr_policy: "multistep" gamma: 0.5 stepvalue: 2 stepvalue: 3 '
            f'display: 1 max_iter: 5 net_param {{ {dot_net([1], [1])} }}')
    solver = create_solver(solver_param(text))
    set_input(solver, [1])
    with LogCapture() as log:
        solver.step(5)
    assert log.matching("MultiStep") == ["MultiStep Status: Iteration 2, step = 1",
                                         "MultiStep Status: Iteration 3, step = 2"]
    assert [m for m in log.messages if ", lr = " in m] == [
        "Iteration 0, lr = 1", "Iteration 1, lr = 1", "Iteration 2, lr = 0.5",
        "Iteration 3, lr = 0.25", "Iteration 4, lr = 0.25"]
    assert solver.current_step == 2


def test_step_policy_keeps_current_step():
    text = ('base_lr: 1 lr_policy: "step" gamma: 0.5 stepsize: 2 '
            f'max_iter: 5 net_param {{ {dot_net([1], [1])} }}')
    solver = create_solver(solver_param(text))
    set_input(solver, [1])
    solver.step(5)
    assert solver.current_step == 2              # the rate of iteration 4 used step 4 // 2
