"""The inference plan from the command line (``pycaffe test``, ``pycaffe time --phase TEST``,
``--noinference_plan``) and from Python (``caffe.Net.plan_inference``)."""
import os
import re

import numpy as np
import pytest

from pycaffe_cli.net.net import Net
from pycaffe_cli.net.weights import save_binaryproto
from pycaffe_cli.proto import caffe_pb2
from tests.numerics import close_to
from tests.scripts.loading import load_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LENET = os.path.join(ROOT, "models", "lenet", "lenet_train_test.prototxt")

DEPLOY = """\
name: "small"
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 2 dim: 3 dim: 6 dim: 6 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 4 kernel_size: 3 bias_term: false
                            weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" }
layer { name: "scale" type: "Scale" bottom: "conv" top: "conv" scale_param { bias_term: true } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool"
        pooling_param { pool: AVE global_pooling: true } }
layer { name: "prob" type: "Softmax" bottom: "pool" top: "prob" }
"""


@pytest.fixture(scope="module")
def lenet(tmp_path_factory):
    """LeNet's train_test net reading 200 generated test digits, and random weights."""
    folder = tmp_path_factory.mktemp("lenet")
    make_digits = load_script("make_digits")
    assert make_digits.main(["--out", str(folder), "--train", "10", "--test", "200"]) == 0
    text = open(LENET).read().replace("data/digits/", f"{folder}/")
    model = folder / "lenet.prototxt"
    model.write_text(text)
    net = Net.from_file(str(model), caffe_pb2.TEST)
    rng = np.random.default_rng(0)
    for blob in net.params:
        blob.data[...] = rng.normal(0, 0.1, blob.shape)
    weights = str(folder / "lenet.caffemodel")
    save_binaryproto(net, weights)
    return str(model), weights


def scores(result):
    """The log lines ``pycaffe test`` writes per batch and at the end."""
    return [m for m in result.messages if re.match(r"(Batch \d+, |Loss: |accuracy = |loss = )", m)]


def test_pycaffe_test_scores_lenet_identically_with_and_without_the_plan(run_cli, lenet):
    model, weights = lenet
    planned = run_cli("test", "--model", model, "--weights", weights, "--iterations", "2")
    plain = run_cli("test", "--model", model, "--weights", weights, "--iterations", "2",
                    "--noinference_plan")
    assert planned.code == 0 and plain.code == 0, planned.err[-2000:] + plain.err[-2000:]
    [line] = [m for m in planned.messages if m.startswith("Inference plan: ")]
    assert re.fullmatch(r"Inference plan: fused 1 ReLU layers, 8 blobs share 2 buffers "
                        r"\(blob memory 7\.5 MB -> 5\.8 MB\)", line), line
    assert not any(m.startswith("Inference plan") for m in plain.messages)
    assert len(scores(planned)) == 7
    assert scores(planned) == scores(plain)


@pytest.fixture
def deploy(write):
    return write("small.prototxt", DEPLOY)


def per_layer(result):
    """{layer: (forward ms, backward ms)} from the per-layer lines of ``pycaffe time``."""
    found = {}
    for message in result.messages:
        match = re.fullmatch(r"\s*(\S+)\t(forward|backward): ([\d.e+-]+) ms\.", message)
        if match:
            found.setdefault(match.group(1), {})[match.group(2)] = float(match.group(3))
    return {name: (ms["forward"], ms["backward"]) for name, ms in found.items()}


def test_time_runs_a_deploy_net_through_the_plan(run_cli, deploy):
    result = run_cli("time", "--model", deploy, "--phase", "TEST", "--iterations", "2")
    assert result.code == 0, result.err[-2000:]
    [line] = [m for m in result.messages if m.startswith("Inference plan: ")]
    assert line.startswith("Inference plan: folded 2 BatchNorm/Scale layers into 1 "
                           "Convolution layers, fused 1 ReLU layers, ")
    assert line.endswith("; backward is not run (the net needs none)")
    layers = per_layer(result)
    assert list(layers) == ["data", "conv", "bn", "scale", "relu", "pool", "prob"]
    assert layers["conv"][0] > 0 and layers["pool"][0] > 0
    assert all(layers[name][0] == 0 for name in ("bn", "scale", "relu"))
    assert all(backward == 0 for _, backward in layers.values())
    assert "Performing Backward" not in result.messages
    assert any(m.startswith("Average Forward pass: ") for m in result.messages)


@pytest.mark.parametrize("flags, planned", [
    (["--phase", "TEST"], True),
    (["--phase", "TEST", "--noinference_plan"], False),
    (["-phase", "TEST", "-inference_plan=false"], False),
    (["--phase=TEST", "--inference_plan=0"], False),
    (["--phase", "TRAIN"], False),
])
def test_time_runs_every_layer_without_the_plan(run_cli, deploy, flags, planned):
    result = run_cli("time", "--model", deploy, "--iterations", "1", *flags)
    assert result.code == 0, result.err[-2000:]
    assert any(m.startswith("Inference plan") for m in result.messages) == planned
    if not planned:
        assert per_layer(result)["bn"][0] > 0
        assert "Performing Backward" in result.messages


def test_the_flag_is_ignored_with_a_warning_by_train(run_cli):
    result = run_cli("train", "--noinference_plan")
    assert "--inference_plan is not used by 'train'; ignored" in result.err


# --- caffe.Net --------------------------------------------------------------------------------
@pytest.fixture
def caffe_net(deploy):
    import caffe
    net = caffe.Net(deploy, caffe.TEST)
    rng = np.random.default_rng(1)
    for name, blobs in net.params.items():
        for blob in blobs:
            blob.data[...] = rng.uniform(0.5, 1.5, blob.data.shape)
    net.blobs["data"].data[...] = rng.normal(0, 1, net.blobs["data"].data.shape)
    return net


def test_caffe_net_plan_inference(caffe_net):
    want = caffe_net.forward(blobs=["pool"])
    want = {name: values.copy() for name, values in want.items()}
    caffe_net.plan_inference(keep=["pool"])
    got = caffe_net.forward(blobs=["pool"])
    for name in ("prob", "pool"):
        close_to(got[name], want[name], rtol=1e-5)
    with pytest.raises(ValueError, match="does not keep 'conv'"):
        caffe_net.forward(blobs=["conv"])
    with pytest.raises(ValueError, match="starts at the first layer"):
        caffe_net.forward(start="pool")
    close_to(caffe_net.forward(end="pool")["pool"], want["pool"], rtol=1e-5)
    with pytest.raises(Exception, match="inference plan"):
        caffe_net.backward()
    caffe_net.plan_inference(None)
    got = caffe_net.forward(blobs=["conv"])
    np.testing.assert_allclose(got["prob"], want["prob"], rtol=1e-5)
    caffe_net.backward()
