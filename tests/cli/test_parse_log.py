"""``pycaffe parse_log``: the CSV files of Caffe's tools/extra/parse_log.py, from a BVLC Caffe
log excerpt, from a pycaffe log, and from a training run made here."""
import datetime
import math
import os
import shutil

import pytest

from pycaffe_cli.commands.parse_log import parse_log

LOGS = os.path.join(os.path.dirname(__file__), "logs")

# caffe_lenet.log: the clock starts at "Solving LeNet" (18:47:00.588135); the first row of
# each table takes the second row's learning rate, as parse_log.py's
# fix_initial_nan_learning_rate does; a row's learning rate is the last one logged before it.
CAFFE_TRAIN = """\
NumIters,Seconds,LearningRate,loss
0.0,0.083412,0.01,2.35237
100.0,0.314692,0.01,0.197427
200.0,0.615867,0.00992565,0.135
300.0,0.845015,0.00985258,0.0912
400.0,1.147966,0.00978075,0.0815
"""
CAFFE_TEST = """\
NumIters,Seconds,LearningRate,accuracy,loss
0.0,0.080626,0.00992565,0.0924,2.3651
200.0,0.61318,0.00992565,0.9612,0.1264
400.0,1.145385,0.00978075,0.9709,0.0901
500.0,1.464098,0.00971013,0.9722,0.0871
"""
# pycaffe_mlp.log, written by `pycaffe train` (models/mlp, 300 iterations); "Solving
# SpiralsMLP" at 10:35:29.755727.
PYCAFFE_TRAIN = """\
NumIters,Seconds,LearningRate,loss
0.0,0.430313,0.05,1.03389
50.0,0.49082,0.05,0.43654
100.0,0.546195,0.05,0.0802887
150.0,0.599195,0.025,0.0348467
200.0,0.63156,0.025,0.0155951
250.0,0.663656,0.0125,0.0123759
"""
PYCAFFE_TEST = """\
NumIters,Seconds,LearningRate,accuracy,loss
0.0,0.415401,0.05,0.465,1.03586
100.0,0.545431,0.05,0.995,0.0411015
200.0,0.631102,0.025,1.0,0.0128267
300.0,0.705808,0.0125,1.0,0.00932753
"""


def csv_bytes(text, delimiter=","):
    """Caffe's CSVs come from the csv module's excel dialect: lines end in CR LF."""
    return text.replace(",", delimiter).replace("\n", "\r\n").encode()


def copy_log(tmp_path, name):
    target = tmp_path / name
    shutil.copy(os.path.join(LOGS, name), target)
    return target


def glog(month_day, clock, message):
    return f"I{month_day} {clock}  4610 solver.cpp:100] {message}\n"


@pytest.mark.parametrize("name, train, test", [
    ("caffe_lenet.log", CAFFE_TRAIN, CAFFE_TEST),
    ("pycaffe_mlp.log", PYCAFFE_TRAIN, PYCAFFE_TEST)])
def test_csv_files_are_parse_log_pys(run_cli, tmp_path, name, train, test):
    log = copy_log(tmp_path, name)
    result = run_cli("parse_log", log, tmp_path)
    assert result.code == 0, result.err
    assert (tmp_path / f"{name}.train").read_bytes() == csv_bytes(train)
    assert (tmp_path / f"{name}.test").read_bytes() == csv_bytes(test)
    assert result.out == ""


def test_output_dir_defaults_to_the_logs_folder_and_flags(run_cli, tmp_path, monkeypatch):
    log = copy_log(tmp_path, "caffe_lenet.log")
    monkeypatch.chdir(tmp_path)
    result = run_cli("parse_log", "--verbose", "--delimiter", "\t", "caffe_lenet.log")
    assert result.code == 0, result.err
    assert result.out.splitlines() == ["Wrote caffe_lenet.log.train",
                                       "Wrote caffe_lenet.log.test"]
    assert (tmp_path / "caffe_lenet.log.train").read_bytes() == csv_bytes(CAFFE_TRAIN, "\t")
    out = tmp_path / "csv"
    out.mkdir()
    assert run_cli("parse_log", str(log), str(out)).code == 0
    assert sorted(os.listdir(out)) == ["caffe_lenet.log.test", "caffe_lenet.log.train"]


@pytest.mark.slow
def test_a_pycaffe_training_run_parses(run_cli, tmp_path):
    (tmp_path / "net.prototxt").write_text('''
        name: "Tiny"
        layer { name: "data" type: "DummyData" top: "data" top: "label"
                dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 }
                                   data_filler { type: "gaussian" }
                                   data_filler { type: "constant" value: 1 } } }
        layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
                inner_product_param { num_output: 2 weight_filler { type: "xavier" } } }
        layer { name: "acc" type: "Accuracy" bottom: "ip" bottom: "label" top: "acc"
                include { phase: TEST } }
        layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
    ''')
    (tmp_path / "solver.prototxt").write_text(f'''
        net: "{tmp_path / 'net.prototxt'}"
        test_iter: 1 test_interval: 5 display: 2 max_iter: 10
        base_lr: 0.1 lr_policy: "step" gamma: 0.5 stepsize: 5
        snapshot_after_train: false random_seed: 1
    ''')
    result = run_cli("train", "--solver", tmp_path / "solver.prototxt")
    assert result.code == 0, result.err
    (tmp_path / "train.log").write_text(result.err)
    log = parse_log(str(tmp_path / "train.log"))
    assert [row["NumIters"] for row in log.train] == [0, 2, 4, 6, 8]
    assert [row["LearningRate"] for row in log.train] == [0.1, 0.1, 0.1, 0.1, 0.05]
    assert [row["NumIters"] for row in log.test] == [0, 5, 10]
    assert list(log.test[0]) == ["NumIters", "Seconds", "LearningRate", "acc", "loss"]
    assert all(0 <= row["acc"] <= 1 and row["loss"] > 0 for row in log.test)
    seconds = [row["Seconds"] for row in log.train]
    assert seconds == sorted(seconds) and seconds[0] >= 0


# --- extract_seconds.py's clock -------------------------------------------------------------
def test_the_year_goes_up_when_the_month_goes_down(tmp_path):
    year = datetime.datetime.now().year
    path = tmp_path / "newyear.log"
    path.write_text(
        glog("1231", "23:59:58.000000", "Solving Net")
        + glog("1231", "23:59:59.500000", "Iteration 0, loss = 1")
        + glog("1231", "23:59:59.600000", "    Train net output #0: loss = 1")
        + glog("0101", "00:00:02.000000", "Iteration 10, loss = 0.5")
        + glog("0101", "00:00:02.250000", "    Train net output #0: loss = 0.5"))
    ctime = datetime.datetime.fromtimestamp(os.path.getctime(path)).year
    assert ctime == year
    log = parse_log(str(path))
    assert [(row["NumIters"], row["Seconds"]) for row in log.train] == [(0, 1.6), (10, 4.25)]


def test_lines_parse_log_py_would_stop_on_are_skipped(tmp_path):
    path = tmp_path / "odd.log"
    path.write_text(
        glog("0301", "10:00:00.000000", "Solving Net")
        + glog("0301", "10:00:01.000000", "Iteration 0, Testing net (#0)")
        + "\n"
        + "a line a Python layer printed\n"
        + glog("0301", "10:00:02.000000", "    Test net output #0: loss = -nan")
        + glog("0301", "10:00:03.000000", "    Test net output #1: top1 = 0.5"))
    log = parse_log(str(path))
    # a single test pass: parse_log.py never writes its only row; we keep it
    [row] = log.test
    assert list(row) == ["NumIters", "Seconds", "LearningRate", "top1"]
    assert (row["NumIters"], row["Seconds"], row["top1"]) == (0, 3.0, 0.5)
    assert math.isnan(row["LearningRate"])
    assert log.train == []


def test_without_a_solving_line_the_clock_starts_at_the_first_line(tmp_path):
    path = tmp_path / "excerpt.log"
    path.write_text(glog("0301", "10:00:00.000000", "Iteration 7, loss = 2")
                    + glog("0301", "10:00:00.500000", "    Train net output #0: loss = 2")
                    + glog("0301", "10:00:01.000000", "Iteration 8, lr = 0.5")
                    + glog("0301", "10:00:01.500000", "    Train net output #0: loss = 1"))
    log = parse_log(str(path))
    assert [(r["NumIters"], r["Seconds"], r["LearningRate"], r["loss"]) for r in log.train] == [
        (7, 0.5, 0.5, 2), (8, 1.5, 0.5, 1)]


def test_rows_missing_an_output_leave_the_cell_empty(run_cli, tmp_path):
    path = tmp_path / "gap.log"
    path.write_text(   # the first output comes before any iteration: not counted
        glog("0301", "10:00:00.000000", "Solving Net")
        + glog("0301", "10:00:01.000000", "    Test net output #0: accuracy = 0.1")
        + glog("0301", "10:00:01.000000", "Iteration 0, Testing net (#0)")
        + glog("0301", "10:00:01.000000", "    Test net output #0: accuracy = 0.25")
        + glog("0301", "10:00:01.000000", "    Test net output #1: loss = 2")
        + glog("0301", "10:00:02.000000", "Iteration 5, Testing net (#0)")
        + glog("0301", "10:00:02.000000", "    Test net output #0: accuracy = 0.5")
        + glog("0301", "10:00:02.000000", "    Test net output #1: loss = nan")
        + glog("0301", "10:00:03.000000", "Iteration 10, Testing net (#0)")
        + glog("0301", "10:00:03.000000", "    Test net output #0: accuracy = 0.75")
        + glog("0301", "10:00:03.000000", "    Test net output #1: loss = 1e-05"))
    assert run_cli("parse_log", path).code == 0
    assert (tmp_path / "gap.log.test").read_bytes() == csv_bytes(
        "NumIters,Seconds,LearningRate,accuracy,loss\n"
        "0.0,1.0,nan,0.25,2.0\n"
        "5.0,2.0,nan,0.5,\n"
        "10.0,3.0,nan,0.75,1e-05\n")
    assert not (tmp_path / "gap.log.train").exists()


# --- mistakes ---------------------------------------------------------------------------------
def test_a_log_without_outputs_writes_nothing_and_says_so(run_cli, tmp_path):
    path = tmp_path / "empty.log"
    path.write_text(glog("0301", "10:00:00.000000", "Solving Net"))
    result = run_cli("parse_log", "--verbose", path)
    assert result.code == 0
    assert result.out.splitlines() == [f"Not writing {path}.train; no lines to write",
                                       f"Not writing {path}.test; no lines to write"]
    assert any("no CSV file written" in line for line in result.messages)
    assert os.listdir(tmp_path) == ["empty.log"]


@pytest.mark.parametrize("arguments, problem", [
    (("absent.log",), "cannot read log file"),
    (("caffe_lenet.log", "no_such_folder"), "cannot write"),
    (("--delimiter", ";;", "caffe_lenet.log"), "--delimiter ';;': give a single character"),
])
def test_mistakes_end_with_one_line(run_cli, tmp_path, monkeypatch, arguments, problem):
    copy_log(tmp_path, "caffe_lenet.log")
    monkeypatch.chdir(tmp_path)
    result = run_cli("parse_log", *arguments)
    assert result.code == 1
    [line] = result.error_lines()
    assert problem in line
    assert os.listdir(tmp_path) == ["caffe_lenet.log"]
