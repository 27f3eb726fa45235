"""Snapshot files (names, binary and HDF5 formats), restore, exact resume, prefix rules."""
import os

import h5py
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.weights import read_weights
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.solvers import create_solver, read_solver
from pycaffe_cli.solvers.state import read_solver_state
from tests.solvers.helpers import LogCapture, dot_net, set_input, solver_param, weights

G = [1.0, -2.0, 0.5]
W0 = [0.5, 1.0, -1.0]


def dot_solver(tmp_path, settings="", prefix="snap"):
    if "max_iter" not in settings:
        settings += " max_iter: 2"
    text = (f'type: "SGD" base_lr: 0.1 lr_policy: "multistep" gamma: 0.5 stepvalue: 1 '
            f'momentum: 0.9 snapshot_prefix: "{tmp_path / prefix}" {settings} '
            f'net_param {{ {dot_net(G, W0)} }}')
    solver = create_solver(solver_param(text))
    set_input(solver, G)
    return solver


# --- files and formats -----------------------------------------------------------------------
def test_binary_snapshot_names_contents_and_log(tmp_path):
    solver = dot_solver(tmp_path)
    with LogCapture() as log:
        solver.solve()
    model, state = tmp_path / "snap_iter_2.caffemodel", tmp_path / "snap_iter_2.solverstate"
    assert sorted(os.listdir(tmp_path)) == sorted([model.name, state.name,
                                                   state.name + ".pycaffe.json"])
    assert f"Snapshotting to binary proto file {model}" in log.messages
    assert f"Snapshotting solver state to binary proto file {state}" in log.messages
    proto = caffe_pb2.SolverState.FromString(state.read_bytes())
    assert (proto.iter, proto.learned_net, proto.current_step) == (2, str(model), 1)
    assert [list(h.shape.dim) for h in proto.history] == [[3], [1]]
    # momentum histories after two steps: 0.1 g then 0.9 * 0.1 g + 0.05 g = 0.14 g
    np.testing.assert_allclose(proto.history[0].data, 0.14 * np.array(G), rtol=1e-6)
    layers = dict(read_weights(str(model)))
    np.testing.assert_array_equal(layers["dot"][0], weights(solver)[0])


def test_hdf5_snapshot_has_caffes_layout(tmp_path):
    solver = dot_solver(tmp_path, "snapshot_format: HDF5")
    with LogCapture() as log:
        solver.solve()
    model = tmp_path / "snap_iter_2.caffemodel.h5"
    state = tmp_path / "snap_iter_2.solverstate.h5"
    assert f"Snapshotting to HDF5 file {model}" in log.messages
    assert f"Snapshotting solver state to HDF5 file {state}" in log.messages
    with h5py.File(state, "r") as h5:
        assert sorted(h5) == ["current_step", "history", "iter", "learned_net"]
        assert h5["iter"].shape == (1,) and h5["iter"].dtype == np.int32
        assert h5["iter"][0] == 2 and h5["current_step"][0] == 1
        learned = h5["learned_net"]
        assert learned.shape == () and learned.id.get_type().get_strpad() == h5py.h5t.STR_NULLTERM
        assert learned[()] == str(model).encode()
        assert sorted(h5["history"]) == ["0", "1"]
        assert h5["history/0"].shape == (3,) and h5["history/0"].dtype == np.float32
        np.testing.assert_allclose(h5["history/1"][:], [0.14], rtol=1e-6)
    with h5py.File(model, "r") as h5:
        np.testing.assert_array_equal(h5["data/dot/0"][:], weights(solver)[0])


@pytest.mark.parametrize("fmt", ["BINARYPROTO", "HDF5"])
def test_restore_round_trip(tmp_path, fmt):
    solver = dot_solver(tmp_path, f"snapshot_format: {fmt}")
    solver.solve()
    suffix = ".solverstate.h5" if fmt == "HDF5" else ".solverstate"
    fresh = dot_solver(tmp_path, f"snapshot_format: {fmt}", prefix="other")
    with LogCapture() as log:
        fresh.restore(str(tmp_path / f"snap_iter_2{suffix}"))
    assert (fresh.iter, fresh.current_step) == (2, 1)
    for a, b in zip(solver.history, fresh.history):
        np.testing.assert_array_equal(a.data, b.data)
    for a, b in zip(weights(solver), weights(fresh)):
        np.testing.assert_array_equal(a, b)
    assert ("SGDSolver: restoring history" in log.messages) == (fmt == "BINARYPROTO")


def test_snapshot_interval_and_after_train(tmp_path):
    dot_solver(tmp_path, "snapshot: 2 max_iter: 5", prefix="a").solve()
    dot_solver(tmp_path, "snapshot: 2 max_iter: 4", prefix="b").solve()
    dot_solver(tmp_path, "snapshot: 2 max_iter: 3 snapshot_after_train: false", prefix="c").solve()
    models = sorted(n for n in os.listdir(tmp_path) if n.endswith(".caffemodel"))
    assert models == ["a_iter_2.caffemodel", "a_iter_4.caffemodel", "a_iter_5.caffemodel",
                      "b_iter_2.caffemodel", "b_iter_4.caffemodel", "c_iter_2.caffemodel"]


def test_snapshot_diff_writes_diffs(tmp_path):
    solver = dot_solver(tmp_path, "snapshot_diff: true max_iter: 1")
    solver.solve()
    proto = caffe_pb2.NetParameter.FromString((tmp_path / "snap_iter_1.caffemodel").read_bytes())
    (layer,) = [lay for lay in proto.layer if lay.name == "dot"]
    assert len(layer.blobs[0].diff) == 3         # the last update step, kept in the diff
    np.testing.assert_allclose(layer.blobs[0].diff, 0.1 * np.array(G), rtol=1e-6)


def test_history_count_mismatch_is_an_error(tmp_path):
    dot_solver(tmp_path).solve()
    text = (f'type: "Adam" base_lr: 0.1 lr_policy: "fixed" '
            f'net_param {{ {dot_net(G, W0)} }}')
    adam = create_solver(solver_param(text))
    with pytest.raises(CaffeError, match="Incorrect length of history blobs"):
        adam.restore(str(tmp_path / "snap_iter_2.solverstate"))


def test_restore_errors(tmp_path):
    solver = dot_solver(tmp_path)
    with pytest.raises(CaffeError, match="not found"):
        solver.restore(str(tmp_path / "missing.solverstate"))
    (tmp_path / "junk.solverstate").write_bytes(b"\xff\xff\xff")
    with pytest.raises(CaffeError, match="junk.solverstate"):
        solver.restore(str(tmp_path / "junk.solverstate"))


def test_learned_net_is_found_beside_the_state_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkdir("run")
    text = (f'type: "SGD" base_lr: 0.1 lr_policy: "fixed" max_iter: 1 '
            f'snapshot_prefix: "run/s" net_param {{ {dot_net(G, W0)} }}')
    solver = create_solver(solver_param(text))
    set_input(solver, G)
    solver.solve()
    assert read_solver_state("run/s_iter_1.solverstate").learned_net == "run/s_iter_1.caffemodel"
    monkeypatch.chdir(tmp_path / "run")
    fresh = create_solver(solver_param(text.replace('"run/s"', '"s2"')))
    fresh.restore("s_iter_1.solverstate")
    np.testing.assert_array_equal(weights(fresh)[0], weights(solver)[0])


# --- exact resume ----------------------------------------------------------------------------
RANDOM_NET = """
name: "random"
layer { name: "data" type: "DummyData" top: "x" top: "y"
        dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 }
                           data_filler { type: "gaussian" } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 }
                              bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "z" bottom: "y" top: "loss" }
layer { name: "count" type: "SolverTestCounter" top: "c"
        dummy_data_param { shape { dim: 1 } } }
layer { name: "silence" type: "Silence" bottom: "c" }
"""


def resume_param(tmp_path, solver_type, prefix, fmt="BINARYPROTO", tests=True):
    rule = "momentum: 0.9 momentum2: 0.999" if solver_type == "Adam" else "momentum: 0.9"
    testing = "test_interval: 2 test_iter: 2 test_compute_loss: true" if tests else ""
    return solver_param(
        f'type: "{solver_type}" {rule} base_lr: 0.05 lr_policy: "step" gamma: 0.5 stepsize: 3 '
        f'weight_decay: 0.01 max_iter: 6 snapshot: 3 snapshot_prefix: "{tmp_path / prefix}" '
        f'snapshot_format: {fmt} random_seed: 1 display: 1 {testing} '
        f'net_param {{ {RANDOM_NET} }}')


def run_recording(solver, resume_file=None):
    """Solve, returning every train loss (exact floats) and the test-output log lines."""
    losses = []
    forward_backward = solver.net.forward_backward

    def recorded():
        losses.append(forward_backward())
        return losses[-1]
    solver.net.forward_backward = recorded
    with LogCapture() as log:
        solver.solve(resume_file)
    tests = [m for m in log.messages if "Testing net" in m or m.startswith("Test loss")
             or "Test net output" in m or m.startswith("Iteration 6, loss")]
    return losses, tests, log


@pytest.mark.parametrize("solver_type, fmt", [("SGD", "BINARYPROTO"), ("Adam", "BINARYPROTO"),
                                              ("Adam", "HDF5")])
def test_resume_matches_an_uninterrupted_run_exactly(tmp_path, solver_type, fmt):
    whole = create_solver(resume_param(tmp_path, solver_type, "whole", fmt))
    losses, tests, _ = run_recording(whole)
    assert len(losses) == 6

    resumed = create_solver(resume_param(tmp_path, solver_type, "resumed", fmt))
    state = str(tmp_path / ("whole_iter_3.solverstate" + (".h5" if fmt == "HDF5" else "")))
    more, more_tests, log = run_recording(resumed, state)
    assert f"Restored random generator and data layer states from {state}.pycaffe.json" in (
        log.messages)
    assert more == losses[3:]                    # bit-identical float losses
    for a, b in zip(weights(whole, "ip"), weights(resumed, "ip")):
        assert np.array_equal(a, b)
    for a, b in zip(whole.history, resumed.history):
        assert np.array_equal(a.data, b.data)
    assert resumed.net.layer_by_name("count").count == whole.net.layer_by_name("count").count
    first_test_after_resume = tests.index("Iteration 4, Testing net (#0)")
    assert more_tests == tests[first_test_after_resume:]


def test_resume_without_the_sidecar_restarts_data_as_caffe_does(tmp_path):
    whole = create_solver(resume_param(tmp_path, "SGD", "whole"))
    losses, _, _ = run_recording(whole)
    state = tmp_path / "whole_iter_3.solverstate"
    os.remove(str(state) + ".pycaffe.json")
    resumed = create_solver(resume_param(tmp_path, "SGD", "resumed"))
    more, _, log = run_recording(resumed, str(state))
    assert any("data layers restart from their beginning" in m for m in log.messages)
    assert resumed.iter == 6 and more != losses[3:]
    assert resumed.net.layer_by_name("count").count == 4      # 3 + the final display forward


def test_resume_with_another_set_of_test_nets_is_refused(tmp_path):
    """The sidecar holds one entry per test net; a solver with another number of test nets
    cannot continue them exactly (one entry per test net)."""
    run_recording(create_solver(resume_param(tmp_path, "SGD", "whole")))
    resumed = create_solver(resume_param(tmp_path, "SGD", "resumed", tests=False))
    state = tmp_path / "whole_iter_3.solverstate"
    with pytest.raises(CaffeError) as caught:
        resumed.restore(str(state))
    assert str(caught.value) == (f'{state}.pycaffe.json: field "test": holds 1 test net '
                                 "state(s); this solver has 0 test net(s): the resume state "
                                 "was saved for another solver")


# --- snapshot prefix rules -------------------------------------------------------------------
def write_solver(path, extra=""):
    path.write_text(f'base_lr: 0.1 lr_policy: "fixed" net_param {{ {dot_net(G, W0)} }} {extra}')
    return str(path)


def test_read_solver_defaults_the_prefix_to_the_solver_path(tmp_path):
    with LogCapture() as log:
        param = read_solver(write_solver(tmp_path / "lenet_solver.prototxt"))
    assert param.snapshot_prefix == str(tmp_path / "lenet_solver")
    assert f"snapshot_prefix was not specified and is set to {tmp_path}/lenet_solver" in (
        log.messages)


def test_read_solver_completes_a_directory_prefix(tmp_path):
    (tmp_path / "snaps").mkdir()
    path = write_solver(tmp_path / "s.prototxt", f'snapshot_prefix: "{tmp_path}/snaps/"')
    assert read_solver(path).snapshot_prefix == f"{tmp_path}/snaps/s"
    path = write_solver(tmp_path / "t.prototxt", f'snapshot_prefix: "{tmp_path}/snaps/x"')
    assert read_solver(path).snapshot_prefix == f"{tmp_path}/snaps/x"


def test_read_solver_upgrades_solver_type(tmp_path):
    param = read_solver(write_solver(tmp_path / "s.prototxt", "solver_type: ADAGRAD"))
    assert param.type == "AdaGrad" and not param.HasField("solver_type")


def test_solver_path_gives_the_prefix_default(tmp_path):
    path = write_solver(tmp_path / "my.prototxt", "max_iter: 1")
    solver = create_solver(read_solver(path), solver_path=path)
    set_input(solver, G)
    solver.solve()
    assert (tmp_path / "my_iter_1.caffemodel").exists()


def test_unwritable_snapshot_prefix_fails_at_start(tmp_path):
    text = (f'base_lr: 0.1 lr_policy: "fixed" snapshot: 10 '
            f'snapshot_prefix: "{tmp_path}/missing/s" net_param {{ {dot_net(G, W0)} }}')
    with pytest.raises(CaffeError, match="Cannot write to snapshot prefix '.*missing/s'.  Make "
                                         "sure that the directory exists and is writable."):
        create_solver(solver_param(text))
    assert not os.listdir(tmp_path)
    text = f'base_lr: 0.1 lr_policy: "fixed" snapshot: 10 net_param {{ {dot_net(G, W0)} }}'
    with pytest.raises(CaffeError, match="snapshot is specified but snapshot_prefix is not"):
        create_solver(solver_param(text))
