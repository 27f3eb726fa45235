"""``pycaffe test`` and ``pycaffe time`` on a small net: Caffe's log lines and numbers."""
import re

import numpy as np
import pytest

from pycaffe_cli.net.net import Net
from pycaffe_cli.net.weights import save_binaryproto
from pycaffe_cli.proto import caffe_pb2
from tests.gpu_helpers import DEVICES

# A constant batch of 4 samples x 3 features, label 2 for every sample; a 3-way classifier.
NET = """\
name: "tiny"
layer {
  name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param {
    shape { dim: 4 dim: 3 } shape { dim: 4 }
    data_filler { type: "constant" value: 0.5 }
    data_filler { type: "constant" value: 2 }
  }
}
layer {
  name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 3 }
}
layer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" include { stage: "probs" } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
layer {
  name: "accuracy" type: "Accuracy" bottom: "ip" bottom: "label" top: "accuracy"
  include { phase: TEST }
}
layer {
  name: "bonus" type: "DummyData" top: "bonus"
  dummy_data_param { shape { dim: 1 } data_filler { type: "constant" value: 7 } }
  include { min_level: 2 }
}
"""

WEIGHT = np.array([[0.1, -0.2, 0.3], [0.4, 0.5, -0.6], [0.7, 0.8, 0.9]], np.float32)
BIAS = np.array([0.05, -0.05, 0.1], np.float32)


def expected_outputs():
    """Softmax over ip = 0.5 * rowsums(W) + b, identical for each sample; label 2."""
    logits = (np.full(3, 0.5, np.float32) @ WEIGHT.T + BIAS).astype(np.float64)
    prob = np.exp(logits - logits.max())
    prob /= prob.sum()
    return {"loss": -np.log(prob[2]), "accuracy": float(np.argmax(logits) == 2),
            "prob": np.tile(prob, 4)}


@pytest.fixture
def model(write):
    return write("tiny.prototxt", NET)


@pytest.fixture
def weights(model, tmp_path):
    net = Net.from_file(model, caffe_pb2.TEST)
    ip = net.layer_by_name("ip")
    ip.blobs[0].data[...] = WEIGHT
    ip.blobs[1].data[...] = BIAS
    path = str(tmp_path / "tiny.caffemodel")
    save_binaryproto(net, path)
    return path


def values(messages, pattern):
    """Every number captured by ``pattern`` (a regex with one group) in the log messages."""
    found = []
    for message in messages:
        match = re.fullmatch(pattern, message)
        if match:
            found.append(float(match.group(1)))
    return found


NUMBER = r"(-?[\d.]+(?:e[-+]\d+)?)"


# --- test ----------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_scores_each_batch_and_the_means(run_cli, model, weights, device):
    result = run_cli("test", "-model", model, "-weights", weights, "-iterations", "3", *device)
    assert result.code == 0, result.err
    messages = result.messages
    want = expected_outputs()
    assert ("Use GPU with device ID 0" if device else "Use CPU.") in messages
    assert "Running for 3 iterations." in messages
    # outputs come in blob-name order, one line per element per batch
    batch_lines = [m for m in messages if m.startswith("Batch ")]
    assert [line.split(" = ")[0] for line in batch_lines] == [
        f"Batch {i}, {name}" for i in range(3) for name in ("accuracy", "loss")]
    assert values(messages, rf"Batch \d, accuracy = {NUMBER}") == [1.0] * 3
    assert values(messages, rf"Batch \d, loss = {NUMBER}") == pytest.approx(
        [want["loss"]] * 3, rel=1e-5)
    [loss] = values(messages, rf"Loss: {NUMBER}")
    assert loss == pytest.approx(want["loss"], rel=1e-5)
    assert "accuracy = 1" in messages
    [line] = [m for m in messages if m.startswith("loss = ")]
    match = re.fullmatch(rf"loss = {NUMBER} \(\* 1 = {NUMBER} loss\)", line)
    assert match and match.group(1) == match.group(2)
    assert float(match.group(1)) == pytest.approx(want["loss"], rel=1e-5)
    # the summary follows the batches
    assert messages.index(line) > messages.index(batch_lines[-1])


def test_numbers_print_like_cpp_streams(run_cli, model, weights):
    result = run_cli("test", "-model", model, "-weights", weights, "-iterations", "1")
    [line] = [m for m in result.messages if m.startswith("Batch 0, loss = ")]
    number = line.split(" = ")[1]
    assert number == f"{np.float32(number):g}"  # six significant digits, no padding
    assert len(number.replace(".", "").lstrip("0")) <= 6


def test_multi_element_outputs_and_stages(run_cli, model, weights):
    result = run_cli("test", "--model", model, "--weights", weights, "--iterations=2",
                     "--stage=probs")
    assert result.code == 0, result.err
    probs = values(result.messages, rf"Batch \d, prob = {NUMBER}")
    assert probs == pytest.approx(np.tile(expected_outputs()["prob"], 2), rel=1e-5)
    means = values(result.messages, rf"prob = {NUMBER}")
    assert means == pytest.approx(expected_outputs()["prob"], rel=1e-5)


@pytest.mark.parametrize("level, has_bonus", [("1", False), ("2", True)])
def test_level(run_cli, model, weights, level, has_bonus):
    result = run_cli("test", "-model", model, "-weights", weights, "-iterations", "1",
                     "-level", level)
    assert result.code == 0, result.err
    assert ("bonus = 7" in result.messages) == has_bonus


def test_loss_weight_in_the_summary(run_cli, write, tmp_path):
    model = write("euclid.prototxt", """\
        layer {
          name: "data" type: "DummyData" top: "a" top: "b"
          dummy_data_param {
            shape { dim: 2 dim: 3 }
            data_filler { type: "constant" value: 1.5 }
            data_filler { type: "constant" value: 0.5 }
          }
        }
        layer {
          name: "loss" type: "EuclideanLoss" bottom: "a" bottom: "b" top: "loss"
          loss_weight: 0.5
        }
        """)
    path = str(tmp_path / "euclid.caffemodel")
    save_binaryproto(Net.from_file(model, caffe_pb2.TEST), path)
    result = run_cli("test", "-model", model, "-weights", path, "-iterations", "2")
    assert result.code == 0, result.err
    # EuclideanLoss = sum((a - b)^2) / (2 N) = 6 / 4 = 1.5; weighted by 0.5
    assert result.messages.count("Batch 0, loss = 1.5") == 1
    assert "Loss: 0.75" in result.messages
    assert "loss = 1.5 (* 0.5 = 0.75 loss)" in result.messages


# --- user errors ---------------------------------------------------------------------------
def test_missing_model_file(run_cli, tmp_path, weights):
    missing = str(tmp_path / "nope.prototxt")
    result = run_cli("test", "-model", missing, "-weights", weights)
    assert result.code == 1
    [line] = result.error_lines()
    assert missing in line
    assert "Traceback" not in result.err


def test_missing_weights_file(run_cli, model, tmp_path):
    missing = str(tmp_path / "nope.caffemodel")
    result = run_cli("test", "-model", model, "-weights", missing)
    assert result.code == 1
    [line] = result.error_lines()
    assert missing in line
    assert "Traceback" not in result.err


@pytest.mark.parametrize("command", [["test", "-weights", "w.caffemodel"], ["time"]])
def test_unknown_layer_type(run_cli, write, command):
    model = write("typo.prototxt", NET.replace('type: "InnerProduct"', 'type: "InnerProdcut"'))
    result = run_cli(*command, "-model", model)
    assert result.code == 1
    [line] = result.error_lines()
    assert re.fullmatch(rf'pycaffe: error: {re.escape(model)}:11: layer "ip": unknown layer '
                        r'type "InnerProdcut".*InnerProduct.*', line), line
    assert "Traceback" not in result.err


@pytest.mark.parametrize("command", [["test", "-weights", "w.caffemodel"], ["time"]])
def test_prototxt_syntax_error(run_cli, write, command):
    model = write("broken.prototxt", NET.replace("num_output: 3", "num_output 3"))
    result = run_cli(*command, "-model", model)
    assert result.code == 1
    [line] = result.error_lines()
    assert re.match(rf"pycaffe: error: {re.escape(model)}:12:36: ", line), line
    assert result.err.splitlines()[-1] == line
    assert "Traceback" not in result.err


# --- time ----------------------------------------------------------------------------------
@pytest.mark.parametrize("phase, layers", [
    (None, ["data", "ip", "loss"]),  # TRAIN by default
    ("TRAIN", ["data", "ip", "loss"]),
    ("TEST", ["data", "label_data_1_split", "ip", "ip_ip_0_split", "loss", "accuracy"]),
])
@pytest.mark.parametrize("device", DEVICES)
def test_time_lines(run_cli, model, phase, layers, device):
    argv = ["time", "-model", model, "-iterations", "3", *device]
    if phase:
        argv += ["-phase", phase]
    result = run_cli(*argv)
    assert result.code == 0, result.err
    # GPU mode: DummyData (as in Caffe) has no GPU pass, and says so once
    messages = [m for m in result.messages if "have no GPU" not in m]
    start = messages.index("Performing Forward")
    assert messages[start + 1].startswith("Initial loss: ")
    benchmark = messages[start + 2:]
    assert benchmark[:3] == ["Performing Backward", "*** Benchmark begins ***",
                             "Testing for 3 iterations."]
    for j in range(3):
        assert re.fullmatch(rf"Iteration: {j + 1} forward-backward time: {NUMBER} ms.",
                            benchmark[3 + j])
    assert benchmark[6] == "Average time per layer: "
    per_layer = benchmark[7:7 + 2 * len(layers)]
    for i, name in enumerate(layers):
        assert re.fullmatch(rf"{name:>10}\tforward: {NUMBER} ms.", per_layer[2 * i])
        assert re.fullmatch(rf"{name:>10}\tbackward: {NUMBER} ms.", per_layer[2 * i + 1])
    tail = benchmark[7 + 2 * len(layers):]
    for line, label in zip(tail, ["Average Forward pass", "Average Backward pass",
                                  "Average Forward-Backward", "Total Time"]):
        assert re.fullmatch(rf"{label}: {NUMBER} ms.", line), line
    assert tail[4:] == ["*** Benchmark ends ***"]


def test_time_initial_loss(run_cli, model):
    # random (unseeded) weights: only check the line is a finite number
    result = run_cli("time", "-model", model, "-iterations", "1")
    [loss] = values(result.messages, rf"Initial loss: {NUMBER}")
    assert np.isfinite(loss) and loss > 0
