"""The Step/Solve/Test loop: log lines, smoothing, test nets, signals, net sources, errors."""
import re

import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.solvers import create_solver
from pycaffe_cli.solvers.adam import AdamSolver
from pycaffe_cli.solvers.sgd import NesterovSolver, SGDSolver
from tests.solvers.helpers import LogCapture, dot_net, set_input, solver_param, weights

G = [1.0, -2.0, 0.5]
W0 = [0.5, 1.0, -1.0]

COUNTER_NET = """
name: "counter"
layer { name: "data" type: "SolverTestCounter" top: "g"
        dummy_data_param { shape { dim: 3 } data_filler { value: 1 } } }
layer { name: "dot" type: "SolverTestDot" bottom: "g" top: "loss"
        blobs { shape { dim: 3 } data: 0.5 data: 1 data: -1 } blobs { shape { dim: 1 } data: 0 } }
"""


def scripted(*responses):
    """An action callback answering ``responses`` in turn, then "none"."""
    queue = list(responses)

    def callback():
        return queue.pop(0) if queue else "none"
    return callback


# --- display and smoothing -------------------------------------------------------------------
def test_smoothed_loss_display_lines_and_final_loss(tmp_path):
    # base_lr 0: iteration i sees counter k = i + 1, loss 0.5 k
    text = (f'base_lr: 0 lr_policy: "fixed" display: 1 average_loss: 3 max_iter: 5 '
            f'snapshot_prefix: "{tmp_path}/s" net_param {{ {COUNTER_NET} }}')
    solver = create_solver(solver_param(text))
    with LogCapture() as log:
        solver.solve()
    shown = [re.fullmatch(r"Iteration (\d+) \(([-\d.e+]+|inf) iter/s, ([\d.e+-]+)s/1 iters\), "
                          r"loss = ([\d.e+-]+)", m) for m in log.matching("Iteration ")
             if " iter/s" in m]
    assert all(shown)
    # 0.5; (0.5+1)/2; (0.5+1+1.5)/3; then a window of 3: 1 + (2-0.5)/3; 1.5 + (2.5-1)/3
    assert [(int(m[1]), float(m[4])) for m in shown] == [
        (0, 0.5), (1, 0.75), (2, 1.0), (3, 1.5), (4, 2.0)]
    assert "    Train net output #0: loss = 0.5 (* 1 = 0.5 loss)" in log.messages
    # the extra forward after training (k = 6, loss 3) joins the window: 2 + (3 - 1.5) / 3
    assert "Iteration 5, loss = 2.5" in log.messages
    assert log.messages[-1] == "Optimization Done."
    assert log.messages[-2] != "Optimization Done."
    assert log.messages[0].startswith("Solving counter")
    assert log.messages[1] == 'Learning Rate Policy: fixed'
    assert f"Snapshotting to binary proto file {tmp_path}/s_iter_5.caffemodel" in log.messages


def test_display_zero_logs_no_iterations():
    text = f'base_lr: 0.1 lr_policy: "fixed" max_iter: 2 net_param {{ {COUNTER_NET} }}'
    solver = create_solver(solver_param(text + " snapshot_after_train: false"))
    with LogCapture() as log:
        solver.solve()
    assert not log.matching("Iteration ")
    assert solver.iter == 2


# --- test nets -------------------------------------------------------------------------------
TEST_EXTRA = """
layer { name: "dot2" type: "SolverTestDot" bottom: "g" top: "loss2" loss_weight: 2
        include { phase: TEST stage: "double" }
        blobs { shape { dim: 3 } data: 1 data: 1 data: 1 } blobs { shape { dim: 1 } data: 0 } }
"""


def test_multiple_test_nets_share_weights_and_log_outputs():
    generic = dot_net(G, W0).replace('name: "dot"\n', 'name: "dot"\n') + TEST_EXTRA
    # split the g blob so it feeds both dots in the test net
    text = (f'base_lr: 0.1 lr_policy: "fixed" max_iter: 2 test_interval: 2 '
            f'test_iter: 1 test_iter: 3 test_compute_loss: true snapshot_after_train: false '
            f'test_state {{ }} test_state {{ stage: "double" }} '
            f'net_param {{ {generic} }}')
    solver = create_solver(solver_param(text))
    assert len(solver.test_nets) == 2
    assert solver.test_nets[0].has_layer("dot2") is False
    assert solver.test_nets[1].has_layer("dot2") is True
    set_input(solver, G)
    with LogCapture() as log:
        solver.solve()
    # iteration 0: g.w0 + b0 = -2; net #1 adds 2 * g.(1,1,1) = 2 * -0.5
    # iteration 2 (plain SGD, two steps): w2 = (0.3, 1.4, -1.1), b2 = -0.2: g.w2 + b2 = -3.25
    tests = [m for m in log.messages if "Testing net" in m or m.startswith("Test loss")
             or "Test net output" in m]
    assert tests == [
        "Iteration 0, Testing net (#0)", "Test loss: -2",
        "    Test net output #0: loss = -2 (* 1 = -2 loss)",
        "Iteration 0, Testing net (#1)", "Test loss: -3",
        "    Test net output #0: loss = -2 (* 1 = -2 loss)",
        "    Test net output #1: loss2 = -0.5 (* 2 = -1 loss)",
        "Iteration 2, Testing net (#0)", "Test loss: -3.25",
        "    Test net output #0: loss = -3.25 (* 1 = -3.25 loss)",
        "Iteration 2, Testing net (#1)", "Test loss: -4.25",
        "    Test net output #0: loss = -3.25 (* 1 = -3.25 loss)",
        "    Test net output #1: loss2 = -0.5 (* 2 = -1 loss)"]
    np.testing.assert_allclose(solver.mean_scores[1], [-3.25, -0.5])


def test_test_scores_average_over_test_iter():
    # counter test net: forwards k = 1, 2, 3 give losses 0.5, 1, 1.5 (mean 1)
    text = (f'base_lr: 0 lr_policy: "fixed" max_iter: 1 test_interval: 1 test_iter: 3 '
            f'test_initialization: true snapshot_after_train: false net_param {{ {COUNTER_NET} }}')
    solver = create_solver(solver_param(text))
    with LogCapture() as log:
        solver.step(1)
    assert "    Test net output #0: loss = 1 (* 1 = 1 loss)" in log.messages
    assert not log.matching("Test loss")         # test_compute_loss is off by default


def test_test_initialization_false_skips_the_first_test():
    text = (f'base_lr: 0 lr_policy: "fixed" max_iter: 2 test_interval: 1 test_iter: 1 '
            f'test_initialization: false snapshot_after_train: false '
            f'net_param {{ {COUNTER_NET} }}')
    solver = create_solver(solver_param(text))
    with LogCapture() as log:
        solver.solve()
    assert log.matching("Iteration ") == ["Iteration 1, Testing net (#0)",
                                          "Iteration 2, Testing net (#0)"]


# --- signals ---------------------------------------------------------------------------------
def test_stop_request_snapshots_and_stops_early(tmp_path):
    text = (f'base_lr: 0.1 lr_policy: "fixed" max_iter: 10 display: 1 '
            f'snapshot_prefix: "{tmp_path}/run" net_param {{ {COUNTER_NET} }}')
    solver = create_solver(solver_param(text), action_callback=scripted("none", "stop"))
    with LogCapture() as log:
        solver.solve()
    assert solver.iter == 2
    assert (tmp_path / "run_iter_2.caffemodel").exists()
    assert (tmp_path / "run_iter_2.solverstate").exists()
    assert log.messages[-1] == "Optimization stopped early."
    assert "Iteration 2, loss" not in " ".join(log.messages)


def test_snapshot_request_snapshots_and_goes_on(tmp_path):
    text = (f'base_lr: 0.1 lr_policy: "fixed" max_iter: 3 snapshot_after_train: false '
            f'snapshot_prefix: "{tmp_path}/run" net_param {{ {COUNTER_NET} }}')
    solver = create_solver(solver_param(text), action_callback=scripted("snapshot"))
    solver.solve()
    assert solver.iter == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "run_iter_1.caffemodel", "run_iter_1.solverstate", "run_iter_1.solverstate.pycaffe.json"]


def test_stop_during_a_test_interrupts_it():
    text = (f'base_lr: 0.1 lr_policy: "fixed" max_iter: 5 test_interval: 1 test_iter: 4 '
            f'snapshot_after_train: false net_param {{ {COUNTER_NET} }}')
    # polled at iteration 0's four test passes, after its update, then in iteration 1's test
    solver = create_solver(solver_param(text), action_callback=scripted(
        "none", "none", "none", "none", "none", "none", "stop"))
    with LogCapture() as log:
        solver.solve()
    assert "Test interrupted." in log.messages
    assert solver.iter == 1
    assert "Optimization stopped early." in log.messages


def test_bad_action_is_a_bug():
    text = f'base_lr: 0.1 lr_policy: "fixed" net_param {{ {COUNTER_NET} }}'
    solver = create_solver(solver_param(text), action_callback=lambda: "pause")
    with pytest.raises(ValueError, match="pause"):
        solver.step(1)


# --- where nets come from --------------------------------------------------------------------
def test_deprecated_solver_type_selects_the_class():
    for enum, cls in [("SGD", SGDSolver), ("NESTEROV", NesterovSolver), ("ADAM", AdamSolver)]:
        text = f'solver_type: {enum} base_lr: 0.1 lr_policy: "fixed" net_param {{ {COUNTER_NET} }}'
        solver = create_solver(solver_param(text))
        assert type(solver) is cls and solver.param.type == cls.type
        assert not solver.param.HasField("solver_type")


def test_train_net_and_test_net_files(tmp_path):
    train = tmp_path / "train.prototxt"
    train.write_text(COUNTER_NET)
    test = tmp_path / "test.prototxt"
    test.write_text(COUNTER_NET.replace('name: "counter"', 'name: "counter_test"'))
    text = (f'train_net: "{train}" test_net: "{test}" test_net: "{test}" test_iter: 1 '
            f'test_iter: 2 test_interval: 5 base_lr: 0.1 lr_policy: "fixed"')
    with LogCapture() as log:
        solver = create_solver(solver_param(text))
    assert solver.net.name == "counter" and solver.net.phase == 0
    assert [n.name for n in solver.test_nets] == ["counter_test", "counter_test"]
    assert all(n.phase == 1 for n in solver.test_nets)
    assert f"Creating training net from train_net file: {train}" in log.messages
    assert f"Creating test net (#1) specified by test_net file: {test}" in log.messages
    assert "Solver scaffolding done." in log.messages


def test_generic_net_file_makes_one_test_net_per_remaining_test_iter(tmp_path):
    path = tmp_path / "net.prototxt"
    path.write_text(COUNTER_NET)
    text = (f'net: "{path}" test_iter: 1 test_iter: 1 test_iter: 1 test_interval: 5 '
            f'test_net_param {{ {COUNTER_NET} }} base_lr: 0.1 lr_policy: "fixed"')
    with LogCapture() as log:
        solver = create_solver(solver_param(text))
    assert len(solver.test_nets) == 3
    assert log.matching("Creating test net") == [
        "Creating test net (#0) specified by test_net_param",
        f"Creating test net (#1) specified by net file: {path}",
        f"Creating test net (#2) specified by net file: {path}"]


def test_train_state_merges_over_the_net_state():
    net = COUNTER_NET + """
    layer { name: "extra" type: "SolverTestDot" bottom: "g" top: "extra"
            include { stage: "more" } }"""
    net = net.replace('layer { name: "dot"', 'layer { name: "split" type: "Split" bottom: "g" '
                      'top: "g1" top: "g2" }\nlayer { name: "dot"').replace(
        'bottom: "g" top: "loss"', 'bottom: "g1" top: "loss"').replace(
        'bottom: "g" top: "extra"', 'bottom: "g2" top: "extra"')
    plain = create_solver(solver_param(f'base_lr: 0 lr_policy: "fixed" net_param {{ {net} }}'))
    staged = create_solver(solver_param(
        f'base_lr: 0 lr_policy: "fixed" train_state {{ stage: "more" }} net_param {{ {net} }}'))
    assert not plain.net.has_layer("extra") and staged.net.has_layer("extra")


def test_random_seed_makes_runs_repeatable():
    net = """
    name: "ip"
    layer { name: "data" type: "DummyData" top: "x" top: "y"
            dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 }
                               data_filler { type: "gaussian" } } }
    layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
            inner_product_param { num_output: 2 weight_filler { type: "gaussian" } } }
    layer { name: "loss" type: "EuclideanLoss" bottom: "z" bottom: "y" top: "loss" }
    """

    def run(seed):
        text = (f'base_lr: 0.1 lr_policy: "fixed" momentum: 0.9 random_seed: {seed} '
                f'net_param {{ {net} }}')
        solver = create_solver(solver_param(text))
        first = weights(solver, "ip")
        solver.step(3)
        return first, weights(solver, "ip")

    a, b, c = run(5), run(5), run(6)
    assert all(np.array_equal(x, y) for x, y in zip(a[0] + a[1], b[0] + b[1]))
    assert not np.array_equal(a[0][0], c[0][0])


# --- errors ----------------------------------------------------------------------------------
@pytest.mark.parametrize("extra, message", [
    ("", "must specify a train net using one of these fields: net, net_param, train_net, "
         "train_net_param"),
    (f'net_param {{ {COUNTER_NET} }} train_net_param {{ {COUNTER_NET} }}',
     "must not contain more than one of these fields"),
    (f'train_net_param {{ {COUNTER_NET} }} test_net_param {{ {COUNTER_NET} }}',
     "test_iter must be specified for each test network"),
    (f'train_net_param {{ {COUNTER_NET} }} test_net_param {{ {COUNTER_NET} }} test_iter: 1 '
     'test_iter: 1 test_interval: 1', "test_iter must be specified for each test network"),
    (f'net_param {{ {COUNTER_NET} }} test_iter: 1 test_iter: 1 test_interval: 1 test_state {{ }}',
     "test_state must be unspecified or specified once per test net"),
    (f'net_param {{ {COUNTER_NET} }} test_iter: 1', "test_interval must be > 0"),
    (f'type: "Adamax" net_param {{ {COUNTER_NET} }}',
     'Unknown solver type: "Adamax" \\(known types: AdaDelta, AdaGrad, Adam, Nesterov, '
     'RMSProp, SGD\\)'),
    ('net: "/no/such/net.prototxt"', "/no/such/net.prototxt"),
])
def test_solver_param_errors(extra, message):
    with pytest.raises(CaffeError, match=message):
        create_solver(solver_param(f'base_lr: 0.1 lr_policy: "fixed" {extra}'))


def test_net_file_errors_name_the_file(tmp_path):
    path = tmp_path / "bad.prototxt"
    path.write_text('name: "bad"\nlayer { name: "oops" type: "NoSuchLayer" top: "x" }\n')
    with pytest.raises(CaffeError, match=re.escape(str(path))):
        create_solver(solver_param(f'base_lr: 0.1 lr_policy: "fixed" net: "{path}"'))
