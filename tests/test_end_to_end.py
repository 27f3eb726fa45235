"""The demo from the README, end to end: make HDF5 data, train the MLP from the CLI, score it."""
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYCAFFE = os.path.join(os.path.dirname(sys.executable), "pycaffe")


def run(args, cwd):
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    return result.stderr


@pytest.mark.slow
def test_mlp_trains_from_the_cli_and_scores(tmp_path):
    shutil.copytree(os.path.join(ROOT, "models"), tmp_path / "models")
    run([sys.executable, os.path.join(ROOT, "scripts", "make_hdf5_demo.py"), "--out",
         "data/mlp", "--train", "3000", "--test", "1000"], tmp_path)
    log = run([PYCAFFE, "train", "-solver", "models/mlp/solver.prototxt"], tmp_path)
    losses = [float(v) for v in re.findall(r"\] Iteration \d+ \(.*\), loss = ([-\d.e]+)", log)]
    assert len(losses) == 20
    assert losses[-1] < 0.25 * losses[0], losses
    accuracies = re.findall(r"Test net output #0: accuracy = ([\d.]+)", log)
    assert float(accuracies[-1]) > 0.9
    assert "Snapshotting to binary proto file data/mlp/mlp_iter_2000.caffemodel" in log
    assert "Optimization Done." in log
    assert (tmp_path / "data/mlp/mlp_iter_1000.solverstate").exists()
    score = run([PYCAFFE, "test", "--model", "models/mlp/train_test.prototxt", "--weights",
                 "data/mlp/mlp_iter_2000.caffemodel", "--iterations", "10"], tmp_path)
    assert len(re.findall(r"Batch \d+, accuracy = ", score)) == 10
    final = re.search(r"\] accuracy = ([\d.]+)", score)
    assert final and float(final.group(1)) > 0.9
    assert re.search(r"\] loss = [\d.]+ \(\* 1 = [\d.]+ loss\)", score)
