"""Compatibility with BVLC Caffe: loss layers without a top, the default snapshot
prefix, mean-file errors, and the gradient through LSTM -> Flatten (which BVLC Caffe loses).
Errors about other forks' fields and layer types: tests/io/test_foreign.py."""
import os
import re

import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.net.net import Net
from pycaffe_cli.proto import caffe_pb2
from tests.cli.conftest import run_cli  # noqa: F401 (fixture)

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST


def net_param(text):
    return text_format.Parse(text, caffe_pb2.NetParameter())


# --- loss layers without a top (Caffe's LossLayer::AutoTopBlobs) ------------------------------
# The tail of BVLC's examples/finetune_pascal_detection/pascal_finetune_trainval_test.prototxt
# (fc8_pascal, a SoftmaxWithLoss without a top, a TEST-only Accuracy), on DummyData instead
# of WindowData.
def pascal_like(loss_top=""):
    return f"""
name: "CaffeNet"
layer {{ name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param {{ shape {{ dim: 8 dim: 6 }} shape {{ dim: 8 }}
    data_filler {{ type: "gaussian" std: 1 }} data_filler {{ type: "constant" value: 3 }} }} }}
layer {{ name: "fc8_pascal" type: "InnerProduct" bottom: "data" top: "fc8_pascal"
  param {{ lr_mult: 10 decay_mult: 1 }} param {{ lr_mult: 20 decay_mult: 0 }}
  inner_product_param {{ num_output: 21 weight_filler {{ type: "gaussian" std: 0.01 }}
    bias_filler {{ type: "constant" value: 0 }} }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "fc8_pascal" bottom: "label"
  {loss_top} }}
layer {{ name: "accuracy" type: "Accuracy" bottom: "fc8_pascal" bottom: "label"
  top: "accuracy" include {{ phase: TEST }} }}
"""


def softmax_loss(scores, labels):
    shifted = scores - scores.max(axis=1, keepdims=True)
    log_prob = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_prob[np.arange(len(labels)), labels.astype(int)].mean()


@pytest.mark.parametrize("phase", [TRAIN, TEST])
def test_a_loss_layer_without_top_gets_an_automatic_one(phase, caplog):
    backend.set_random_seed(1)
    with caplog.at_level("INFO", logger="pycaffe"):
        net = Net(net_param(pascal_like()), phase)
    loss_layer = net.layer_entries[net.layer_id("loss")]
    (top_id,) = loss_layer.top_ids
    assert net.blob_entries[top_id].name == "(automatic)"
    assert net.blob_entries[top_id].loss_weight == 1
    assert "loss -> (automatic)" in caplog.messages
    outputs = [net.blob_names[i] for i in net.output_blob_indices]
    assert outputs == (["accuracy"] if phase == TEST else [])
    loss = net.forward()
    scores = net.blob_by_name("fc8_pascal").data
    expected = softmax_loss(scores, net.blob_by_name("label").data)
    assert loss == pytest.approx(expected, rel=1e-5)
    assert net.blobs[top_id].data.item() == pytest.approx(expected, rel=1e-5)
    if phase == TRAIN:
        assert loss_layer.need_backward
        net.backward()
        assert np.abs(net.layer_by_name("fc8_pascal").blobs[0].diff).sum() > 0


LOSS_BOTTOMS = {
    "EuclideanLoss": 'bottom: "pred" bottom: "target"',
    "SigmoidCrossEntropyLoss": 'bottom: "pred" bottom: "target"',
    "SoftmaxWithLoss": 'bottom: "pred" bottom: "label"',
    "HingeLoss": 'bottom: "pred" bottom: "label"',
    "MultinomialLogisticLoss": 'bottom: "prob" bottom: "label"',
    "InfogainLoss": 'bottom: "prob" bottom: "label" bottom: "infogain"',
    "ContrastiveLoss": 'bottom: "pred" bottom: "target" bottom: "similar"',
}
LOSS_INPUTS = """
name: "auto"
layer { name: "in" type: "Input" top: "pred" top: "target" top: "label" top: "similar"
  top: "infogain" input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 3 }
  shape { dim: 4 } shape { dim: 4 } shape { dim: 3 dim: 3 } } }
layer { name: "prob" type: "Softmax" bottom: "pred" top: "prob" }
"""


@pytest.mark.parametrize("type_name", sorted(LOSS_BOTTOMS))
def test_every_bvlc_loss_layer_gets_an_automatic_top(type_name):
    text = LOSS_INPUTS + f'layer {{ name: "loss" type: "{type_name}" {LOSS_BOTTOMS[type_name]} }}'
    net = Net(net_param(text), TRAIN)
    rng = np.random.default_rng(0)
    net.blob_by_name("pred").data[...] = rng.normal(size=(4, 3))
    net.blob_by_name("target").data[...] = rng.uniform(size=(4, 3))
    net.blob_by_name("label").data[...] = [0, 2, 1, 2]
    net.blob_by_name("similar").data[...] = [1, 0, 1, 0]
    net.blob_by_name("infogain").data[...] = np.eye(3)
    (top_id,) = net.layer_entries[net.layer_id("loss")].top_ids
    assert net.blob_entries[top_id].name == "(automatic)"
    loss = net.forward()
    assert np.isfinite(loss) and loss > 0
    assert loss == pytest.approx(net.blob_entries[top_id].blob.data.item())


def test_two_losses_without_tops_are_both_counted():
    text = """
name: "two"
layer { name: "in" type: "Input" top: "a" top: "b" top: "label"
  input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 3 } shape { dim: 2 } } }
layer { name: "l2" type: "EuclideanLoss" bottom: "a" bottom: "b" }
layer { name: "xent" type: "SoftmaxWithLoss" bottom: "a" bottom: "label" loss_weight: 0.5 }
"""
    net = Net(net_param(text), TRAIN)
    a, b = np.array([[1.0, 2, 3], [0, -1, 1]]), np.array([[0.0, 2, 1], [1, 1, 1]])
    net.blob_by_name("a").data[...] = a
    net.blob_by_name("b").data[...] = b
    net.blob_by_name("label").data[...] = [2, 0]
    expected = ((a - b) ** 2).sum() / 2 / 2 + 0.5 * softmax_loss(a, np.array([2, 0]))
    assert net.forward() == pytest.approx(expected, rel=1e-5)
    assert [net.blob_names[i] for i in net.output_blob_indices] == []


def test_the_automatic_top_is_no_bottom_for_later_layers():
    text = pascal_like() + 'layer { name: "s" type: "Silence" bottom: "(automatic)" }'
    with pytest.raises(CaffeError, match='layer "s": unknown bottom blob "\\(automatic\\)"'):
        Net(net_param(text), TRAIN)


def test_layers_that_are_not_losses_still_need_their_tops():
    text = """
name: "no_top"
layer { name: "in" type: "Input" top: "a" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "a" inner_product_param { num_output: 2 } }
"""
    with pytest.raises(CaffeError, match='layer "ip": InnerProduct layer takes exactly 1 top'):
        Net(net_param(text), TRAIN)


def iteration_losses(result):
    return [line.split(", loss = ")[1] for line in result.messages
            if re.match(r"Iteration \d+ \(.*\), loss = ", line)]


def test_train_and_test_count_the_automatic_loss_as_caffe_does(run_cli, tmp_path):  # noqa: F811
    """The automatic top is no net output (no "Train net output" line for it, as in Caffe),
    but its loss is in "Iteration N, loss = " and in ``pycaffe test``'s "Loss:"."""
    results = {}
    for name, top in (("auto", ""), ("named", 'top: "loss"')):
        (tmp_path / f"{name}.prototxt").write_text(pascal_like(top))
        solver = tmp_path / f"{name}_solver.prototxt"
        solver.write_text(f'net: "{tmp_path / name}.prototxt" base_lr: 0.01 lr_policy: "fixed" '
                          'max_iter: 3 display: 1 test_iter: 1 test_interval: 100 '
                          f'random_seed: 5 snapshot_prefix: "{tmp_path / name}"')
        train = run_cli("train", "--solver", solver)
        assert train.code == 0, train.err
        test = run_cli("test", "--model", tmp_path / f"{name}.prototxt", "--weights",
                       tmp_path / f"{name}_iter_3.caffemodel", "--iterations", 2)
        assert test.code == 0, test.err
        results[name] = train, test
    (auto_train, auto_test), (named_train, named_test) = results["auto"], results["named"]
    assert len(iteration_losses(auto_train)) == 3
    assert iteration_losses(auto_train) == iteration_losses(named_train)
    assert not any("Train net output" in m for m in auto_train.messages)
    assert any(m.startswith("    Train net output #0: loss = ") for m in named_train.messages)
    loss_line = [m for m in auto_test.messages if m.startswith("Loss: ")]
    assert loss_line and loss_line == [m for m in named_test.messages if m.startswith("Loss: ")]
    assert float(loss_line[0].split()[1]) > 0
    assert "loss -> (automatic)" in auto_test.messages


# --- the default snapshot prefix (Caffe's UpgradeSnapshotPrefixProperty, applied once) ------
SOLVER = ('net: "{net}" base_lr: 0.01 lr_policy: "fixed" max_iter: 2 snapshot: 2 '
          'random_seed: 1 {extra}')


def write_solver(path, net, extra=""):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SOLVER.format(net=net, extra=extra))
    return path


def snapshot_files(root):
    return sorted(os.path.relpath(os.path.join(folder, name), root)
                  for folder, _, names in os.walk(root) for name in names
                  if "_iter_" in name)


@pytest.mark.parametrize("same_named_folder", [False, True])
def test_no_prefix_snapshots_beside_the_solver_path(run_cli, tmp_path, monkeypatch,  # noqa: F811
                                                    same_named_folder):
    """Caffe's prefix is the solver path without its extension, folders included; a folder of
    that name changes nothing (the prefix is completed once, when the file is read)."""
    (tmp_path / "net.prototxt").write_text(pascal_like())
    write_solver(tmp_path / "sub" / "solver.prototxt", tmp_path / "net.prototxt")
    if same_named_folder:
        (tmp_path / "sub" / "solver").mkdir()
    monkeypatch.chdir(tmp_path)
    result = run_cli("train", "--solver", os.path.join("sub", "solver.prototxt"))
    assert result.code == 0, result.err
    assert snapshot_files(tmp_path) == [os.path.join("sub", f"solver_iter_2{ext}") for ext in
                                        (".caffemodel", ".solverstate",
                                         ".solverstate.pycaffe.json")]
    prefix = os.path.join("sub", "solver")
    assert f"snapshot_prefix was not specified and is set to {prefix}" in result.messages
    assert not any("snapshot_prefix was a directory" in m for m in result.messages)


@pytest.mark.parametrize("same_named_folder", [False, True])
def test_no_prefix_and_a_bare_solver_name_snapshot_in_the_working_directory(
        run_cli, tmp_path, monkeypatch, same_named_folder):  # noqa: F811
    (tmp_path / "net.prototxt").write_text(pascal_like())
    write_solver(tmp_path / "lenet_solver.prototxt", tmp_path / "net.prototxt")
    if same_named_folder:
        (tmp_path / "lenet_solver").mkdir()
    monkeypatch.chdir(tmp_path)
    assert run_cli("train", "--solver", "lenet_solver.prototxt").code == 0
    assert snapshot_files(tmp_path) == ["lenet_solver_iter_2.caffemodel",
                                        "lenet_solver_iter_2.solverstate",
                                        "lenet_solver_iter_2.solverstate.pycaffe.json"]


def test_a_directory_prefix_is_completed_once(run_cli, tmp_path):  # noqa: F811
    (tmp_path / "net.prototxt").write_text(pascal_like())
    (tmp_path / "snaps" / "s").mkdir(parents=True)  # "snaps/s" must not become "snaps/s/s"
    solver = write_solver(tmp_path / "s.prototxt", tmp_path / "net.prototxt",
                          f'snapshot_prefix: "{tmp_path / "snaps"}"')
    assert run_cli("train", "--solver", solver).code == 0
    assert snapshot_files(tmp_path / "snaps") == ["s_iter_2.caffemodel", "s_iter_2.solverstate",
                                                  "s_iter_2.solverstate.pycaffe.json"]


def test_the_python_solver_completes_the_prefix_once(tmp_path, monkeypatch):
    import caffe
    (tmp_path / "net.prototxt").write_text(pascal_like())
    write_solver(tmp_path / "sub" / "solver.prototxt", tmp_path / "net.prototxt")
    (tmp_path / "sub" / "solver").mkdir()
    monkeypatch.chdir(tmp_path)
    solver = caffe.SGDSolver(os.path.join("sub", "solver.prototxt"))
    assert solver.param.snapshot_prefix == os.path.join("sub", "solver")


# --- mean-file errors name the layer and its line ---------------------------------------------
def write_mean_net(write_file, mean_file):
    source = write_file("list.txt", "a.png 0\n")
    return write_file("mean.prototxt", f"""\
        name: "m"
        layer {{
          name: "data" type: "ImageData" top: "data" top: "label"
          transform_param {{ mean_file: "{mean_file}" }}
          image_data_param {{ source: "{source}" batch_size: 1 }}
        }}
        """)


def short_blob(path):
    blob = caffe_pb2.BlobProto()
    blob.shape.dim.extend([1, 2, 3])
    blob.data.extend([1.0] * 5)
    path.write_bytes(blob.SerializeToString())


@pytest.mark.parametrize("kind, words", [
    ("missing", "cannot read mean file"),
    ("directory", "cannot read mean file"),
    ("corrupt", "is not a valid Caffe binary proto (BlobProto)"),
    ("short", "holds 5 data values; it needs 6"),
])
def test_mean_file_errors_name_the_layer_and_line(run_cli, write, tmp_path, kind,  # noqa: F811
                                                  words):
    mean = tmp_path / "mean.binaryproto"
    if kind == "directory":
        mean.mkdir()
    elif kind == "corrupt":
        mean.write_bytes(b"\xff" * 40)
    elif kind == "short":
        short_blob(mean)
    path = write_mean_net(write, mean)
    result = run_cli("time", "--model", path, "--iterations", 1)
    assert result.code == 1 and "Traceback" not in result.err
    (line,) = result.error_lines()
    assert line.startswith(f'pycaffe: error: {path}:3: layer "data": ')
    assert words in line and str(mean) in line


# --- LSTM -> Flatten keeps its gradient (BVLC Caffe's Flatten swaps the diff away) ---------
T, N, D, H = 3, 2, 4, 5


def lstm_net(view):
    params = ("flatten_param { axis: 1 }" if view == "Flatten"
              else "reshape_param { shape { dim: 0 dim: -1 } }")
    text = f"""
name: "lstm_{view}"
force_backward: true
layer {{ name: "in" type: "Input" top: "x" top: "cont" top: "target"
  input_param {{ shape {{ dim: {T} dim: {N} dim: {D} }} shape {{ dim: {T} dim: {N} }}
                shape {{ dim: {T} dim: {N * H} }} }} }}
layer {{ name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" top: "h"
  recurrent_param {{ num_output: {H} weight_filler {{ type: "uniform" min: -0.5 max: 0.5 }}
    bias_filler {{ type: "uniform" min: -0.5 max: 0.5 }} }} }}
layer {{ name: "view" type: "{view}" bottom: "h" top: "flat" {params} }}
layer {{ name: "loss" type: "EuclideanLoss" bottom: "flat" bottom: "target" top: "loss" }}
"""
    backend.set_random_seed(7)
    net = Net(net_param(text), TRAIN)
    rng = np.random.default_rng(0)
    net.blob_by_name("x").data[...] = rng.normal(size=(T, N, D))
    net.blob_by_name("cont").data[...] = [[0, 0], [1, 1], [1, 1]]
    net.blob_by_name("target").data[...] = rng.normal(size=(T, N * H))
    return net


def gradients(net):
    net.clear_param_diffs()
    loss = net.forward()
    net.backward()
    diffs = [net.blob_by_name("x").diff] + [p.diff for p in net.learnable_params]
    return loss, [diff.copy() for diff in diffs]


def test_lstm_then_flatten_gets_the_gradient_of_lstm_then_reshape():
    flat_loss, flat = gradients(lstm_net("Flatten"))
    reshape_loss, reshaped = gradients(lstm_net("Reshape"))
    assert flat_loss == reshape_loss
    for mine, reference in zip(flat, reshaped):
        assert np.abs(reference).sum() > 0
        np.testing.assert_array_equal(mine, reference)


def test_lstm_then_flatten_gradient_matches_finite_differences():
    """Central differences of the loss along each gradient's own direction (the steepest
    one, so float32 rounding stays far below the difference) give the gradient's norm."""
    net = lstm_net("Flatten")
    gradients(net)  # a first pass: the second must see the same sharing
    _, (x_grad, *param_grads) = gradients(net)
    step = 1e-2
    for blob, analytic in [(net.blob_by_name("x"), x_grad)] + list(
            zip(net.learnable_params, param_grads)):
        norm = float(np.linalg.norm(analytic))
        assert norm > 1e-2
        direction = analytic / norm
        saved = blob.data.copy()
        blob.data[...] = saved + step * direction
        plus = net.forward()
        blob.data[...] = saved - step * direction
        minus = net.forward()
        blob.data[...] = saved
        assert (plus - minus) / (2 * step) == pytest.approx(norm, rel=1e-3)
