"""caffe.Net.plan_inference sees every way weights change: writes through net.params,
share_with, copy_from (.caffemodel and .h5), and solver steps on a net it shares with. A plan
that kept stale folded or Winograd-transformed weights would be off by O(1); the plan's own
rounding stays within inference.accuracy.OUTPUT_BOUND."""
import numpy as np
import pytest

import caffe
from pycaffe_cli.inference.accuracy import OUTPUT_BOUND, deviation

# conv1 folds BatchNorm and Scale and runs Winograd (32 -> 32 channels, 16 tiles); conv2
# keeps its own weights with a fused ReLU and runs Winograd too.
LAYERS = """
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 32 kernel_size: 3 pad: 1 bias_term: false
                            weight_filler { type: "msra" } } }
layer { name: "bn" type: "BatchNorm" bottom: "conv1" top: "conv1" }
layer { name: "scale" type: "Scale" bottom: "conv1" top: "conv1"
        scale_param { bias_term: true } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "conv2" type: "Convolution" bottom: "conv1" top: "conv2"
        convolution_param { num_output: 32 kernel_size: 3 pad: 1
                            weight_filler { type: "msra" } bias_filler { type: "gaussian" } } }
layer { name: "relu2" type: "ReLU" bottom: "conv2" top: "conv2" }
layer { name: "ip" type: "InnerProduct" bottom: "conv2" top: "ip"
        inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }
"""
DEPLOY = """
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 1 dim: 32 dim: 16 dim: 16 } } }
""" + LAYERS + """
layer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" }
"""
TRAIN = """
layer { name: "data" type: "DummyData" top: "data" top: "label"
        dummy_data_param { shape { dim: 2 dim: 32 dim: 16 dim: 16 } shape { dim: 2 }
                           data_filler { type: "gaussian" }
                           data_filler { type: "constant" value: 1 } } }
""" + LAYERS + """
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""
INPUT = np.random.default_rng(0).standard_normal((1, 32, 16, 16)).astype(np.float32)


def randomize(net, seed):
    """New weights everywhere (about unit-scale activations), BatchNorm's variance
    positive."""
    rng = np.random.default_rng(seed)
    for blobs in net.params.values():
        for blob in blobs:
            blob.data[...] = rng.normal(0, 0.1, blob.data.shape)
    net.params["bn"][1].data[...] = rng.uniform(0.5, 2, net.params["bn"][1].data.shape)
    net.params["bn"][2].data[...] = 1


@pytest.fixture
def deploy(write):
    return write("deploy.prototxt", DEPLOY)


@pytest.fixture
def planned(deploy):
    net = caffe.Net(deploy, caffe.TEST)
    randomize(net, 1)
    net.plan_inference(keep=["ip"])
    net.forward(data=INPUT)
    assert net._plan.summary().count("Winograd") == 1  # 2 layers: the path under test
    return net


def plain_logits(deploy, source):
    """The plain net's logits with ``source``'s weights (shared, not copied)."""
    plain = caffe.Net(deploy, caffe.TEST)
    plain.share_with(source)
    return plain.forward(blobs=["ip"], data=INPUT)["ip"].copy()


def logits(net):
    return net.forward(blobs=["ip"], data=INPUT)["ip"]


def assert_plain(net, want):
    assert deviation(logits(net), want) <= OUTPUT_BOUND


def test_writes_through_params(planned, deploy):
    for name in ("conv1", "bn", "scale", "conv2"):
        planned.params[name][0].data[...] *= 1.5
        assert_plain(planned, plain_logits(deploy, planned))


def test_share_with(deploy):
    """Nets built the same way: each blob of one was written as often as the same blob of
    the others, so only which memory a blob uses tells the plan that its weights changed."""
    planned, other, other_twin = (caffe.Net(deploy, caffe.TEST) for _ in range(3))
    for seed, net in ((0, planned), (1, other), (1, other_twin)):
        randomize(net, seed)
    planned.plan_inference(keep=["ip"])
    want = plain_logits(deploy, other_twin)  # reads other_twin, leaves other untouched
    assert deviation(logits(planned), want) > 1e-2  # other weights
    planned.share_with(other)
    assert_plain(planned, want)


@pytest.mark.parametrize("suffix", [".caffemodel", ".caffemodel.h5"])
def test_copy_from_a_weights_file(planned, deploy, tmp_path, suffix):
    other = caffe.Net(deploy, caffe.TEST)
    randomize(other, 3)
    path = str(tmp_path / f"other{suffix}")
    (other.save_hdf5 if suffix.endswith(".h5") else other.save)(path)
    planned.copy_from(path)
    assert_plain(planned, plain_logits(deploy, other))


def test_a_net_loaded_with_weights(deploy, tmp_path):
    source = caffe.Net(deploy, caffe.TEST)
    randomize(source, 4)
    path = str(tmp_path / "w.caffemodel")
    source.save(path)
    net = caffe.Net(deploy, caffe.TEST, weights=path)
    net.plan_inference(keep=["ip"])
    assert_plain(net, plain_logits(deploy, source))


def test_solver_steps_on_shared_weights(planned, deploy, write):
    solver_file = write("solver.prototxt", f'net: "{write("train.prototxt", TRAIN)}"\n'
                                           "base_lr: 0.5 lr_policy: \"fixed\" momentum: 0.9\n")
    solver = caffe.SGDSolver(solver_file)
    planned.share_with(solver.net)
    before = logits(planned).copy()
    solver.step(2)  # changes the weights and BatchNorm's running statistics
    want = plain_logits(deploy, solver.net)
    assert deviation(want, before) > 1e-3
    assert_plain(planned, want)
