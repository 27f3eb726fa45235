"""``import caffe`` after ``make setup`` from any working directory, including one holding a
folder named ``caffe`` (a BVLC Caffe checkout in a home folder, say): Python would take that
folder for a namespace package before an editable install's import hook, so the install must
put the real package on sys.path (setuptools' strict editable mode, Makefile)."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYCAFFE = os.path.join(os.path.dirname(sys.executable), "pycaffe")


@pytest.fixture
def home_with_caffe_checkout(tmp_path):
    """A working directory with BVLC Caffe's layout beside: caffe/python/caffe/... and no
    caffe/__init__.py at the top."""
    package = tmp_path / "caffe" / "python" / "caffe"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('BVLC caffe, not built')\n")
    (tmp_path / "caffe" / "Makefile").write_text("all:\n")
    return tmp_path


def clean_environment():
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def test_import_caffe_beside_a_caffe_folder(home_with_caffe_checkout):
    result = subprocess.run(
        [sys.executable, "-c", "import caffe; print(caffe.Net.__module__, caffe.__file__)"],
        cwd=home_with_caffe_checkout, env=clean_environment(), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    module, path = result.stdout.split()
    assert module == "caffe.pycaffe"
    assert not path.startswith(str(home_with_caffe_checkout))


@pytest.mark.slow
def test_a_python_layer_trains_beside_a_caffe_folder(home_with_caffe_checkout):
    """The Python layers of models/python_layer_example (they ``import caffe``) under
    ``pycaffe train`` started in that directory."""
    example = os.path.join(ROOT, "models", "python_layer_example")
    for name in ("example_layers.py", "train_test.prototxt"):
        shutil.copy(os.path.join(example, name), home_with_caffe_checkout / name)
    (home_with_caffe_checkout / "solver.prototxt").write_text(
        'net: "train_test.prototxt"\nbase_lr: 0.05\nmomentum: 0.9\nlr_policy: "fixed"\n'
        "display: 10\nmax_iter: 20\nsnapshot_after_train: false\nrandom_seed: 1701\n")
    result = subprocess.run([PYCAFFE, "train", "--solver", "solver.prototxt"],
                            cwd=home_with_caffe_checkout, env=clean_environment(),
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Optimization Done." in result.stderr
