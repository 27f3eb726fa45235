"""models/ssd_shapes (``make demo-detection``'s SSD): a few iterations of training on a small
generated shapes set, the solver's detection test, ``pycaffe test`` on the snapshot, and a run
resumed from the middle snapshot ending on the very same weights, all from the command line as
the Makefile runs them."""
import os
import re
import shutil
import sys

import pytest

from tests.test_end_to_end import PYCAFFE, ROOT, run


@pytest.mark.slow
def test_ssd_shapes_trains_tests_and_scores(tmp_path):
    shutil.copytree(os.path.join(ROOT, "models", "ssd_shapes"), tmp_path / "models" / "ssd_shapes")
    run([sys.executable, os.path.join(ROOT, "scripts", "make_shapes.py"), "--out", "data/shapes",
         "--train", "48", "--test", "40"], tmp_path)
    solver = (tmp_path / "models/ssd_shapes/solver.prototxt").read_text()
    for old, new in (("max_iter: 1000", "max_iter: 6"), ("test_interval: 500", "test_interval: 6"),
                     ("test_iter: 10", "test_iter: 2"), ("snapshot: 1000", "snapshot: 3"),
                     ("display: 50", "display: 2")):
        assert old in solver
        solver = solver.replace(old, new)
    (tmp_path / "models/ssd_shapes/solver.prototxt").write_text(solver)
    log = run([PYCAFFE, "train", "--solver", "models/ssd_shapes/solver.prototxt"], tmp_path)
    losses = [float(v) for v in re.findall(r"\] Iteration \d+ \(.*\), loss = ([-\d.e]+)", log)]
    assert len(losses) == 3 and all(loss > 0 for loss in losses), losses
    found = re.findall(r"Test net output #0: detection_eval = ([\d.e-]+)", log)
    assert len(found) == 1 and 0 <= float(found[0]) <= 1, log[-3000:]
    weights = "data/shapes/ssd_shapes_iter_6.caffemodel"
    assert (tmp_path / weights).exists()
    score = run([PYCAFFE, "test", "--model", "models/ssd_shapes/test.prototxt", "--weights",
                 weights, "--iterations", "2"], tmp_path)
    assert re.search(r"detection_eval", score), score[-3000:]
    # resumed from iteration 3: the AnnotatedData position, its samplers' random stream and
    # Adam's history carry over, so iteration 6's weights are the uninterrupted run's
    finished = (tmp_path / weights).read_bytes()
    run([PYCAFFE, "train", "--solver", "models/ssd_shapes/solver.prototxt", "--snapshot",
         "data/shapes/ssd_shapes_iter_3.solverstate"], tmp_path)
    assert (tmp_path / weights).read_bytes() == finished
