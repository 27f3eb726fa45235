"""A diverging run keeps training, as Caffe's does, and warns once naming the first layer whose
output is NaN or inf."""
import numpy as np
import pytest

from pycaffe_cli.solvers import create_solver
from pycaffe_cli.solvers.divergence import first_non_finite_output
from tests.solvers.helpers import LogCapture, solver_param
from tests.solvers.test_snapshots import dot_solver


DIVERGING_NET = """
name: "diverging"
layer { name: "data" type: "DummyData" top: "x" top: "y"
        dummy_data_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 2 }
                           data_filler { type: "constant" value: 0 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        inner_product_param { num_output: 2 weight_filler { type: "constant" value: 1 } } }
layer { name: "log" type: "Log" bottom: "z" top: "logz" }
layer { name: "scale" type: "Power" bottom: "logz" top: "logz" power_param { scale: 2 } }
layer { name: "loss" type: "EuclideanLoss" bottom: "logz" bottom: "y" top: "loss" }
"""


@pytest.mark.filterwarnings("ignore::RuntimeWarning")     # numpy's, about the NaNs
def test_divergence_warns_once_naming_the_first_non_finite_layer():
    solver = create_solver(solver_param(
        f'base_lr: 0.1 lr_policy: "fixed" max_iter: 4 snapshot_after_train: false '
        f'net_param {{ {DIVERGING_NET} }}'))
    with LogCapture() as log:
        solver.solve()
    assert solver.iter == 4                      # training goes on, as in Caffe
    assert log.warnings() == [
        'Iteration 0, loss = inf: training diverged: layer "log" (type Log) is the first whose '
        'output ("logz") is NaN or inf. Training goes on, as in Caffe (this is reported once).']


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_divergence_by_overflow_in_both_modes(engine):
    net = DIVERGING_NET.replace("value: 0 }", "value: 3e38 }").replace(
        'layer { name: "log" type: "Log" bottom: "z" top: "logz" }', "").replace(
        'bottom: "logz" top: "logz"', 'bottom: "z" top: "z"').replace(
        'bottom: "logz" bottom: "y"', 'bottom: "z" bottom: "y"')
    solver = create_solver(solver_param(
        f'base_lr: 0.1 lr_policy: "fixed" max_iter: 2 snapshot_after_train: false '
        f'net_param {{ {net} }}'))
    with LogCapture() as log:
        solver.solve()
    (warning,) = [w for w in log.warnings() if "diverged" in w]    # GPU mode adds others
    assert warning.startswith('Iteration 0, loss = inf: training diverged: layer "ip" (type '
                              'InnerProduct) is the first whose output ("z") is NaN or inf.')


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_non_finite_weights_are_mentioned():
    solver = create_solver(solver_param(
        f'base_lr: 0.1 lr_policy: "fixed" max_iter: 1 snapshot_after_train: false '
        f'net_param {{ {DIVERGING_NET.replace("value: 0 }", "value: 1 }")} }}'))
    solver.net.layer_by_name("ip").blobs[0].data[0, 0] = np.nan
    with LogCapture() as log:
        solver.solve()
    (warning,) = log.warnings()
    assert 'layer "ip" (type InnerProduct) is the first whose output ("z") is NaN or inf; its ' \
           "own weights are NaN or inf" in warning


def test_finite_training_scans_nothing(tmp_path, monkeypatch):
    import pycaffe_cli.solvers.divergence as divergence
    monkeypatch.setattr(divergence, "first_non_finite_output", lambda net: pytest.fail("scan"))
    with LogCapture() as log:
        dot_solver(tmp_path, "max_iter: 3").solve()
    assert log.warnings() == []


def test_first_non_finite_output_is_none_for_a_finite_net(tmp_path):
    solver = dot_solver(tmp_path, "max_iter: 1")
    solver.net.forward()
    assert first_non_finite_output(solver.net) is None
