"""The bundled model prototxts: every net builds, deploy nets time, LeNet learns the digits."""
import os
import re
import subprocess
import sys

import pytest

from pycaffe_cli.io.prototxt import read_net_param, read_solver_param
from pycaffe_cli.net import Net
from pycaffe_cli.proto import caffe_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYCAFFE = os.path.join(os.path.dirname(sys.executable), "pycaffe")
DEPLOY = {"lenet": "lenet_deploy.prototxt", "caffenet": "deploy.prototxt",
          "alexnet": "deploy.prototxt", "googlenet": "deploy.prototxt"}


def small_batch(name, batch=1):
    """A deploy NetParameter with its Input batch cut to ``batch`` (to keep tests quick)."""
    param = read_net_param(os.path.join(ROOT, "models", name, DEPLOY[name]))
    param.layer[0].input_param.shape[0].dim[0] = batch
    return param


@pytest.mark.parametrize("name,classes", [("lenet", 10), ("caffenet", 1000),
                                          ("alexnet", 1000), ("googlenet", 1000)])
def test_deploy_nets_build_and_run(name, classes):
    net = Net(small_batch(name), caffe_pb2.TEST)
    net.forward()
    [prob] = net.output_blobs
    assert prob.shape == (1, classes)
    assert prob.data.sum() == pytest.approx(1.0, rel=1e-5)


def test_googlenet_shapes_match_the_published_model():
    net = Net(small_batch("googlenet"), caffe_pb2.TEST)
    assert net.blob_by_name("inception_3a/output").shape == (1, 256, 28, 28)
    assert net.blob_by_name("inception_4e/output").shape == (1, 832, 14, 14)
    assert net.blob_by_name("inception_5b/output").shape == (1, 1024, 7, 7)


def test_caffenet_parameter_shapes_match_the_reference_model():
    net = Net(small_batch("caffenet"), caffe_pb2.TEST)
    shapes = {name: layer.blobs[0].shape for name, layer in zip(net.layer_names, net.layers)
              if layer.blobs}
    assert shapes == {"conv1": (96, 3, 11, 11), "conv2": (256, 48, 5, 5),
                      "conv3": (384, 256, 3, 3), "conv4": (384, 192, 3, 3),
                      "conv5": (256, 192, 3, 3), "fc6": (4096, 9216), "fc7": (4096, 4096),
                      "fc8": (1000, 4096)}


@pytest.mark.parametrize("path", ["lenet/lenet_train_test.prototxt",
                                  "cifar10_quick/cifar10_quick_train_test.prototxt",
                                  "caffenet/train_val.prototxt", "alexnet/train_val.prototxt",
                                  "mlp/train_test.prototxt"])
def test_train_nets_parse_and_filter_by_phase(path):
    param = read_net_param(os.path.join(ROOT, "models", path))
    data_layers = [layer for layer in param.layer if not layer.bottom]
    assert {rule.phase for layer in data_layers for rule in layer.include} == {
        caffe_pb2.TRAIN, caffe_pb2.TEST}


@pytest.mark.parametrize("path", ["lenet/lenet_solver.prototxt",
                                  "cifar10_quick/cifar10_quick_solver.prototxt",
                                  "caffenet/solver.prototxt", "alexnet/solver.prototxt",
                                  "mlp/solver.prototxt"])
def test_solvers_name_an_existing_net(path):
    solver = read_solver_param(os.path.join(ROOT, "models", path))
    assert os.path.exists(os.path.join(ROOT, solver.net))


def test_pycaffe_time_runs_a_deploy_net():
    result = subprocess.run([PYCAFFE, "time", "-model",
                             os.path.join(ROOT, "models/lenet/lenet_deploy.prototxt"),
                             "-iterations", "2"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"conv1\tforward: [\d.e-]+ ms\.", result.stderr)
    assert "Average Forward-Backward" in result.stderr


@pytest.mark.slow
def test_lenet_learns_the_generated_digits(tmp_path):
    run = dict(cwd=tmp_path, capture_output=True, text=True, timeout=900)
    made = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_digits.py"),
                           "--out", "data/digits", "--train", "3000", "--test", "500"], **run)
    assert made.returncode == 0, made.stderr
    solver = open(os.path.join(ROOT, "models/lenet/lenet_solver.prototxt")).read()
    solver = (solver.replace("models/lenet/", os.path.join(ROOT, "models/lenet/"))
              .replace("max_iter: 2000", "max_iter: 300").replace("test_iter: 20", "test_iter: 5")
              .replace("test_interval: 500", "test_interval: 300"))
    (tmp_path / "solver.prototxt").write_text(solver)
    trained = subprocess.run([PYCAFFE, "train", "--solver", "solver.prototxt"], **run)
    assert trained.returncode == 0, trained.stderr[-3000:]
    accuracy = re.findall(r"Test net output #0: accuracy = ([\d.]+)", trained.stderr)
    assert float(accuracy[0]) < 0.3 < 0.9 < float(accuracy[-1])
