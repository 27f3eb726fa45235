"""SSD's solver additions: eval_type "detection" (TestDetection's mAP lines) against hand-
computed average precisions, ``pycaffe test`` on the same net, and lr_policy "plateau"
against a hand-computed schedule, across a snapshot and resume."""
import re

import numpy as np
import pytest

from pycaffe_cli.layers.base import Layer, registered_for_test
from pycaffe_cli.solvers import create_solver
from pycaffe_cli.solvers.state import read_solver_state
from tests.cli.conftest import run_in_process
from tests.solvers.helpers import LogCapture, solver_param

# Two test batches. Batch 0 is the fork's DetectionEvaluate test data; batch 1 adds a hit of
# class 2 and a missed box of class 1. Pad rows: item_id -1.
PAD_DET, PAD_GT = [-1, 0, 0, 0, 0, 0, 0], [-1, 0, 0, 0, 0, 0, 0, 0]
BATCHES = [
    ([[0, 1, 0.3, 0.1, 0.0, 0.4, 0.3], [0, 1, 0.7, 0.0, 0.1, 0.2, 0.3],
      [0, 1, 0.9, 0.7, 0.6, 0.8, 0.8], [1, 2, 0.8, 0.2, 0.1, 0.4, 0.4],
      [1, 2, 0.1, 0.4, 0.3, 0.7, 0.5], [1, 1, 0.2, 0.8, 0.1, 1.0, 0.3],
      [1, 3, 0.2, 0.8, 0.1, 1.0, 0.3], [2, 1, 0.2, 0.8, 0.1, 1.0, 0.3]],
     [[0, 1, 0, 0.1, 0.1, 0.3, 0.3, 0], [0, 1, 0, 0.6, 0.6, 0.8, 0.8, 1],
      [1, 2, 0, 0.3, 0.3, 0.6, 0.5, 0], [1, 1, 0, 0.7, 0.1, 0.9, 0.3, 0]]),
    ([[0, 2, 0.5, 0.1, 0.1, 0.5, 0.5]] + [PAD_DET] * 7,
     [[0, 2, 0, 0.1, 0.1, 0.5, 0.5, 0], [0, 1, 0, 0.6, 0.6, 0.9, 0.9, 0]] + [PAD_GT] * 2),
]
# By hand. Class 1 (4 positives): 0.9 tp, 0.7 tp, 0.3 fp, 0.2 tp, 0.2 fp -> precision 1, 1,
# 2/3, 3/4, 3/5 at recall 1/4, 1/2, 1/2, 3/4, 3/4. Class 2 (2 positives): 0.8 fp, 0.5 tp,
# 0.1 tp -> precision 0, 1/2, 2/3 at recall 0, 1/2, 1. Class 3 has no positives row.
AP = {"Integral": (0.25 + 0.25 + 0.75 * 0.25, 0.5 * 0.5 + 2 / 3 * 0.5),
      "MaxIntegral": (0.5 + 0.75 * 0.25, 2 / 3),
      "11point": ((6 + 2 * 0.75) / 11, 2 / 3)}


class DetectionFeedLayer(Layer):
    """Tops: BATCHES[k % 2] as detections (1 x 1 x 8 x 7) and ground truth (1 x 1 x 4 x 8)."""
    type = "TestDetectionFeed"
    exact_num_bottom = 0
    exact_num_top = 2

    def layer_setup(self, bottom, top):
        self.count = 0

    def reshape(self, bottom, top):
        top[0].reshape((1, 1, 8, 7))
        top[1].reshape((1, 1, 4, 8))

    def forward_cpu(self, bottom, top):
        det, gt = BATCHES[self.count % len(BATCHES)]
        top[0].data[...] = np.asarray(det, np.float32).reshape(1, 1, 8, 7)
        top[1].data[...] = np.asarray(gt, np.float32).reshape(1, 1, 4, 8)
        self.count += 1


class ScriptedLossLayer(Layer):
    """A loss without params or bottoms: LOSSES[k] on the k-th forward."""
    type = "TestScriptedLoss"
    exact_num_bottom = 0
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        self.count = 0

    def reshape(self, bottom, top):
        top[0].reshape(())

    def default_loss_weight(self, top_index):
        return 1.0

    def forward_cpu(self, bottom, top):
        top[0].data[...] = LOSSES[self.count]
        self.count += 1

    def get_state(self):
        return {"count": self.count}

    def set_state(self, state):
        self.count = state["count"]


@pytest.fixture(autouse=True, scope="module")
def test_layers():
    with registered_for_test(DetectionFeedLayer, ScriptedLossLayer):
        yield


TRAIN_NET = 'layer { name: "loss" type: "TestScriptedLoss" top: "loss" }'
TEST_NET = """
  layer { name: "feed" type: "TestDetectionFeed" top: "det" top: "gt" }
  layer { name: "eval" type: "DetectionEvaluate" bottom: "det" bottom: "gt"
          top: "detection_eval"
          detection_evaluate_param { num_classes: 3 background_label_id: 0
                                     overlap_threshold: 0.3 } }
"""
LOSSES = [5, 4, 4, 4, 4, 3, 3, 3, 3, 3, 3, 3, 3]


def numbers(messages, prefix):
    return [float(m.rsplit(" ", 1)[1]) for m in messages if m.startswith(prefix)]


@pytest.mark.parametrize("ap_version", ["Integral", "MaxIntegral", "11point"])
def test_detection_test_logs_the_map(ap_version):
    text = (f'base_lr: 0.1 lr_policy: "fixed" max_iter: 1 test_iter: 2 test_interval: 1 '
            f'test_initialization: true eval_type: "detection" ap_version: "{ap_version}" '
            f'show_per_class_result: true train_net_param {{ {TRAIN_NET} }} '
            f'test_net_param {{ {TEST_NET} }}')
    solver = create_solver(solver_param(text))
    with LogCapture() as log:
        solver.step(1)
    class1, class2 = AP[ap_version]
    assert numbers(log.messages, "class1: ") == pytest.approx([class1], abs=1e-6)
    assert numbers(log.messages, "class2: ") == pytest.approx([class2], abs=1e-6)
    lines = log.matching("    Test net output #0: detection_eval = ")
    assert numbers(lines, "") == pytest.approx([(class1 + class2) / 2], abs=1e-6)
    assert solver.mean_scores[0] == pytest.approx([(class1 + class2) / 2], abs=1e-6)


def test_detection_test_refuses_outputs_that_are_not_rows():
    from pycaffe_cli.errors import CaffeError
    net = TEST_NET + 'layer { name: "l" type: "TestScriptedLoss" top: "extra" }'
    text = ('base_lr: 0.1 lr_policy: "fixed" max_iter: 1 test_iter: 1 test_interval: 1 '
            'eval_type: "detection" '
            f'train_net_param {{ {TRAIN_NET} }} test_net_param {{ {net} }}')
    solver = create_solver(solver_param(text))
    with pytest.raises(CaffeError, match='output "extra"'):
        solver.test_detection(0)


def test_pycaffe_test_prints_the_map(tmp_path):
    from pycaffe_cli.net.net import Net
    from pycaffe_cli.net.weights import save_binaryproto
    from pycaffe_cli.proto import caffe_pb2
    model = tmp_path / "det.prototxt"
    model.write_text(TEST_NET)
    weights = str(tmp_path / "det.caffemodel")
    save_binaryproto(Net.from_file(str(model), caffe_pb2.TEST), weights)
    result = run_in_process("test", "--model", model, "--weights", weights, "--iterations",
                            "2", "--ap_version", "11point")
    assert result.code == 0, result.err
    class1, class2 = AP["11point"]
    assert numbers(result.messages, "class1: ") == pytest.approx([class1], abs=1e-6)
    summary = [m for m in result.messages if m.startswith("detection_eval = ")]
    assert len(summary) == 1 and summary[0].endswith(" (11point mAP)")
    assert float(summary[0].split()[2]) == pytest.approx((class1 + class2) / 2, abs=1e-6)
    assert not [m for m in result.messages if m.startswith("Batch 0, detection_eval")]
    bad = run_in_process("test", "--model", model, "--weights", weights, "--ap_version", "VOC")
    assert bad.code != 0 and "ap_version" in bad.err


# --- lr_policy "plateau" ---------------------------------------------------------------------
# losses 5, 4, 4, 4, 4, 3, ... with windows 2 then 3 (average_loss 1: smoothed = loss):
# iter 0: minimum 5; iter 1: minimum 4 (event); iter 3 >= 1 + 2: step 1 (event);
# iter 5: minimum 3 (event); iter 8 >= 5 + 3: step 2; no windows left after that.
PLATEAU = ('base_lr: 1 lr_policy: "plateau" gamma: 0.5 plateau_winsize: 2 plateau_winsize: 3 '
           'display: 1 max_iter: 12 ')
RATES = [1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25]


def rates(log):
    return [float(m.rsplit(" ", 1)[1]) for m in log.messages if ", lr = " in m]


def test_plateau_schedule_and_log_lines():
    solver = create_solver(solver_param(PLATEAU + f"train_net_param {{ {TRAIN_NET} }}"))
    with LogCapture() as log:
        solver.step(12)
    assert rates(log) == RATES
    assert log.matching("Plateau Status") == [
        "Plateau Status: Iteration 0, current minimum_loss = 5",
        "Plateau Status: Iteration 1, current minimum_loss = 4",
        "Plateau Status: Iteration 3, step = 1",
        "Plateau Status: Iteration 3, current minimum_loss = 4",
        "Plateau Status: Iteration 5, current minimum_loss = 3",
        "Plateau Status: Iteration 8, step = 2",
        "Plateau Status: Iteration 8, current minimum_loss = 3"]
    assert tuple(solver.plateau) == (2, 3.0, 8) and solver.current_step == 2


@pytest.mark.parametrize("snapshot_format", ["BINARYPROTO", "HDF5"])
def test_plateau_state_survives_snapshot_and_resume(tmp_path, snapshot_format):
    """Snapshot at iteration 4 (minimum 4 since iteration 1, step 1 at iteration 3), resume:
    the rest of the schedule is the uninterrupted one's."""
    prefix = tmp_path / "plateau"
    text = (PLATEAU + f'snapshot: 4 snapshot_prefix: "{prefix}" '
            f'snapshot_format: {snapshot_format} train_net_param {{ {TRAIN_NET} }}')
    solver = create_solver(solver_param(text))
    solver.step(4)
    suffix = ".solverstate.h5" if snapshot_format == "HDF5" else ".solverstate"
    state_file = f"{prefix}_iter_4{suffix}"
    saved = read_solver_state(state_file)
    assert (saved.current_step, saved.minimum_loss, saved.iter_last_event) == (1, 4.0, 3)
    resumed = create_solver(solver_param(text))
    resumed.restore(state_file)
    with LogCapture() as log:
        resumed.step(8)
    assert rates(log) == RATES[4:]
    assert tuple(resumed.plateau) == (2, 3.0, 8)


def test_other_policies_write_no_plateau_fields(tmp_path):
    prefix = tmp_path / "fixed"
    text = (f'base_lr: 1 lr_policy: "fixed" max_iter: 1 snapshot: 1 snapshot_prefix: '
            f'"{prefix}" train_net_param {{ {TRAIN_NET} }}')
    solver = create_solver(solver_param(text))
    solver.step(1)
    from pycaffe_cli.proto import caffe_pb2
    with open(f"{prefix}_iter_1.solverstate", "rb") as stream:
        state = caffe_pb2.SolverState.FromString(stream.read())
    assert not state.HasField("minimum_loss") and not state.HasField("iter_last_event")


def test_plateau_without_windows_is_fixed():
    solver = create_solver(solver_param('base_lr: 0.5 lr_policy: "plateau" display: 1 '
                                        f'max_iter: 3 train_net_param {{ {TRAIN_NET} }}'))
    with LogCapture() as log:
        solver.step(3)
    assert rates(log) == [0.5, 0.5, 0.5]
    assert not re.search("step = ", " ".join(log.messages))
