"""caffe.SGDSolver and friends: built from a solver file, the train and test nets as caffe.Nets
sharing the solver's memory, step/solve/apply_update checked against hand-computed updates,
snapshots and restore, callbacks."""
import os

import numpy as np
import pytest

import caffe
from tests.caffe_api.nets import conv_ip_loss
from tests.numerics import close_to

SOLVER = """net: "{net}"
test_iter: 2 test_interval: 10 base_lr: 0.01 momentum: 0.9
weight_decay: 0.0005 lr_policy: "inv" gamma: 0.0001 power: 0.75
display: 0 max_iter: 20 snapshot_after_train: false snapshot_prefix: "{prefix}"
"""


@pytest.fixture
def solver_file(write, tmp_path):
    net = write("net.prototxt", conv_ip_loss())
    return write("solver.prototxt", SOLVER.format(net=net, prefix=tmp_path / "model"))


def fill_labels(net):
    net.blobs["label"].data[...] = (np.arange(5) % 13).reshape(5, 1, 1, 1)


@pytest.mark.parametrize("cls, type_name", [
    (caffe.SGDSolver, "SGD"), (caffe.NesterovSolver, "Nesterov"),
    (caffe.AdaGradSolver, "AdaGrad"), (caffe.RMSPropSolver, "RMSProp"),
    (caffe.AdaDeltaSolver, "AdaDelta"), (caffe.AdamSolver, "Adam")])
def test_each_solver_class_uses_its_rule(write, tmp_path, cls, type_name):
    net = write("net.prototxt", conv_ip_loss())
    text = SOLVER.format(net=net, prefix=tmp_path / "model")
    if type_name in ("AdaGrad", "RMSProp"):   # Caffe refuses momentum for these two
        text = text.replace("momentum: 0.9", "")
    solver = cls(write("solver.prototxt", text))
    assert solver._solver.type == type_name
    assert solver.iter == 0 and solver.param.max_iter == 20


def test_get_solver_uses_the_files_type(write, tmp_path):
    net = write("net.prototxt", conv_ip_loss())
    path = write("adam.prototxt", SOLVER.format(net=net, prefix=tmp_path / "m")
                 + 'type: "Adam"\n')
    assert caffe.get_solver(path)._solver.type == "Adam"


def test_solve_runs_to_max_iter_and_nets_share_memory(solver_file):
    solver = caffe.SGDSolver(solver_file)
    fill_labels(solver.net)
    fill_labels(solver.test_nets[0])
    before = solver.net.params["ip"][0].data.copy()
    solver.solve()
    assert solver.iter == 20
    assert not np.array_equal(before, solver.net.params["ip"][0].data)
    solver.step(3)
    assert solver.iter == 23


def test_apply_update_is_one_sgd_step(solver_file):
    """Zero weights, unit gradients, no history: data = -lr * (diff + decay * data) = -0.01."""
    solver = caffe.SGDSolver(solver_file)
    weights = solver.net.layers[1].blobs[0]
    data = weights.data[...]
    data[...] = 0
    weights.diff[...] = 1
    solver.apply_update()
    np.testing.assert_allclose(data, -0.01, rtol=1e-7)
    assert solver.iter == 0


def test_step_matches_a_hand_computed_momentum_update(solver_file):
    solver = caffe.SGDSolver(solver_file)
    net = solver.net
    fill_labels(net)
    grads = []
    solver.add_callback(lambda: None,
                        lambda: grads.append(net.params["ip"][1].diff.copy()))
    bias = net.params["ip"][1].data.copy()
    history = np.zeros_like(bias)
    for it in range(2):
        solver.step(1)
        rate = 0.01 * (1 + 0.0001 * it) ** -0.75
        history = 0.9 * history + rate * grads[it]   # the bias has decay_mult 1 here
        history += rate * 0.0005 * bias
        bias = bias - history
        close_to(net.params["ip"][1].data, bias, rtol=1e-5)


def test_callbacks_run_in_order(solver_file):
    solver = caffe.SGDSolver(solver_file)
    fill_labels(solver.net)
    events = []

    class Recorder:
        def on_start(self):
            events.append("start")

        def on_gradients_ready(self):
            events.append(("ready", solver.iter))

    solver.add_callback(Recorder())
    solver.step(2)
    assert events == ["start", ("ready", 0), "start", ("ready", 1)]
    with pytest.raises(TypeError, match="two callables"):
        solver.add_callback(object())


def test_snapshot_and_restore(solver_file, tmp_path):
    solver = caffe.SGDSolver(solver_file)
    fill_labels(solver.net)
    solver.step(3)
    solver.snapshot()
    state = tmp_path / "model_iter_3.solverstate"
    assert state.is_file() and (tmp_path / "model_iter_3.caffemodel").is_file()
    weights = solver.net.params["ip"][0].data.copy()
    solver.step(2)
    again = caffe.SGDSolver(solver_file)
    again.restore(str(state))
    assert again.iter == 3
    assert np.array_equal(again.net.params["ip"][0].data, weights)


def test_nets_outlive_the_solver(solver_file):
    solver = caffe.SGDSolver(solver_file)
    nets = [solver.net] + solver.test_nets
    assert len(nets) == 2
    del solver
    assert all(np.isfinite(p.data.sum()) for net in nets for ps in net.params.values()
               for p in ps)


def test_missing_solver_file_names_it(tmp_path):
    with pytest.raises(caffe.pycaffe.CaffeError, match="no_solver.prototxt"):
        caffe.SGDSolver(str(tmp_path / "no_solver.prototxt"))


def test_snapshot_prefix_default_is_relative_to_the_working_directory(write, tmp_path,
                                                                      monkeypatch):
    monkeypatch.chdir(tmp_path)
    net = write("net.prototxt", conv_ip_loss())
    path = write("s.prototxt", SOLVER.format(net=net, prefix="model"))
    solver = caffe.SGDSolver(path)
    solver.snapshot()
    assert os.path.isfile("model_iter_0.caffemodel")
