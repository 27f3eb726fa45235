"""The bundled model prototxts: every net builds, deploy nets time, LeNet learns the digits."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from pycaffe_cli.io.prototxt import read_net_param, read_solver_param
from pycaffe_cli.net.net import Net
from pycaffe_cli.proto import caffe_pb2
from tests.scripts.loading import load_script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYCAFFE = os.path.join(os.path.dirname(sys.executable), "pycaffe")
DEPLOY = {"lenet": "lenet_deploy.prototxt", "caffenet": "deploy.prototxt",
          "alexnet": "deploy.prototxt", "googlenet": "deploy.prototxt",
          "resnet50": "deploy.prototxt", "squeezenet1.1": "deploy.prototxt",
          "mobilenet_v2": "deploy.prototxt"}
# The nets scripts/make_deploy_models.py writes: their Input shape and their output's. The
# fully convolutional ones end in a 1x1 blob, as the published prototxts do.
GENERATED = {"resnet50": ((1, 3, 224, 224), (1, 1000)),
             "squeezenet1.1": ((1, 3, 227, 227), (1, 1000, 1, 1)),
             "mobilenet_v2": ((1, 3, 224, 224), (1, 1000, 1, 1))}
# Values the weights hold: (learnable: every blob but BatchNorm's, BatchNorm's mean, variance
# and scale factor). Derived from the architectures; the learnable counts are the published
# ones (torchvision's ResNet-50 25,557,032 + the 64 conv1 biases He's Caffe model has;
# SqueezeNet 1.1 1,235,496; torchvision's MobileNet v2 3,504,872 + shicai's conv2_1/expand,
# 32x32 weights and 2x32 Scale values; BVLC GoogLeNet 6,998,552).
PARAMETERS = {"resnet50": (25_557_096, 53_173), "squeezenet1.1": (1_235_496, 0),
              "mobilenet_v2": (3_505_960, 34_229), "googlenet": (6_998_552, 0)}


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


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_deploy_nets_run_at_their_input_shape(name):
    input_shape, output_shape = GENERATED[name]
    net = Net(read_net_param(os.path.join(ROOT, "models", name, DEPLOY[name])), caffe_pb2.TEST)
    [data] = net.input_blobs
    assert data.shape == input_shape
    data.data[...] = np.random.default_rng(0).standard_normal(input_shape)
    net.forward()
    [prob] = net.output_blobs
    assert net.blob_names[net.output_blob_indices[0]] == "prob"
    assert prob.shape == output_shape
    assert prob.data.sum() == pytest.approx(1.0, rel=1e-5)


def test_generated_deploy_nets_are_what_the_script_writes(tmp_path):
    script = load_script("make_deploy_models")
    for path in script.write_models(str(tmp_path)):
        name = os.path.basename(os.path.dirname(path))
        with open(path) as made, open(os.path.join(ROOT, "models", name, DEPLOY[name])) as kept:
            assert made.read() == kept.read(), f"models/{name}: run scripts/make_deploy_models.py"


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_parameter_counts_match_the_published_models(name):
    net = Net(small_batch(name), caffe_pb2.TEST)
    counts = {True: 0, False: 0}
    for layer in net.layers:
        counts[layer.type != "BatchNorm"] += sum(blob.count() for blob in layer.blobs)
    assert (counts[True], counts[False]) == PARAMETERS[name]


def test_published_layer_names_and_shapes():
    nets = {name: Net(small_batch(name), caffe_pb2.TEST) for name in GENERATED}
    shapes = {name: {layer_name: layer.blobs[0].shape
                     for layer_name, layer in zip(net.layer_names, net.layers) if layer.blobs}
              for name, net in nets.items()}
    assert shapes["resnet50"]["conv1"] == (64, 3, 7, 7)
    assert len(nets["resnet50"].layer_by_name("conv1").blobs) == 2    # He's conv1 has a bias
    assert shapes["resnet50"]["res4f_branch2b"] == (256, 256, 3, 3)
    assert shapes["resnet50"]["bn5c_branch2c"] == (2048,)
    assert shapes["resnet50"]["fc1000"] == (1000, 2048)
    assert nets["resnet50"].blob_by_name("res5c").shape == (1, 2048, 7, 7)
    assert shapes["squeezenet1.1"]["fire9/expand3x3"] == (256, 64, 3, 3)
    assert shapes["squeezenet1.1"]["conv10"] == (1000, 512, 1, 1)
    assert nets["squeezenet1.1"].blob_by_name("fire9/concat").shape == (1, 512, 14, 14)
    assert shapes["mobilenet_v2"]["conv4_7/dwise"] == (384, 1, 3, 3)
    assert shapes["mobilenet_v2"]["fc7"] == (1000, 1280, 1, 1)
    assert nets["mobilenet_v2"].blob_by_name("block_6_2").shape == (1, 160, 7, 7)
    assert nets["mobilenet_v2"].blob_by_name("conv4_6/linear/bn").shape == (1, 64, 28, 28)


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
