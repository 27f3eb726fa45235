"""The Faster R-CNN (ZF) and R-FCN (ResNet-50) test nets scripts/make_rcnn_models.py writes:
the committed files are the script's output, the published layer names and weight shapes are
there, and with random weights both nets run forward through ``caffe.Net`` on one small image
(the Python proposal layer from models/faster_rcnn/python included)."""
import os

import numpy as np
import pytest

import caffe
from tests.scripts.loading import load_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RPN_PATH = os.path.join(ROOT, "models", "faster_rcnn", "python")
ZF = os.path.join(ROOT, "models", "faster_rcnn_zf", "test.prototxt")
RFCN = os.path.join(ROOT, "models", "rfcn_resnet50", "test_agnostic.prototxt")
CLASSES = 21


@pytest.fixture
def on_path(monkeypatch):
    monkeypatch.syspath_prepend(RPN_PATH)


def test_committed_nets_are_what_the_script_writes(tmp_path):
    script = load_script("make_rcnn_models")
    for path in script.write_models(str(tmp_path)):
        relative = os.path.relpath(path, str(tmp_path))
        with open(path) as made, open(os.path.join(ROOT, "models", relative)) as kept:
            assert made.read() == kept.read(), f"models/{relative}: run " \
                                               "scripts/make_rcnn_models.py"


def weight_shapes(net):
    return {name: [blob.data.shape for blob in blobs] for name, blobs in net.params.items()}


def test_published_layer_names_and_weight_shapes(on_path):
    zf = weight_shapes(caffe.Net(ZF, caffe.TEST))
    assert zf["conv1"] == [(96, 3, 7, 7), (96,)] and zf["conv5"] == [(256, 384, 3, 3), (256,)]
    assert zf["rpn_conv/3x3"][0] == (256, 256, 3, 3)
    assert zf["rpn_cls_score"][0] == (18, 256, 1, 1) and zf["rpn_bbox_pred"][0] == (36, 256, 1, 1)
    assert zf["fc6"][0] == (4096, 256 * 6 * 6) and zf["fc7"][0] == (4096, 4096)
    assert zf["cls_score"][0] == (CLASSES, 4096) and zf["bbox_pred"][0] == (4 * CLASSES, 4096)
    rfcn = weight_shapes(caffe.Net(RFCN, caffe.TEST))
    assert rfcn["conv1"] == [(64, 3, 7, 7), (64,)]
    assert rfcn["bn_conv1"] == [(64,), (64,), (1,)] and rfcn["scale_conv1"] == [(64,), (64,)]
    assert rfcn["res4f_branch2c"] == [(1024, 256, 1, 1)]
    assert rfcn["res5a_branch1"] == [(2048, 1024, 1, 1)]
    assert rfcn["res5c_branch2b"] == [(512, 512, 3, 3)]
    assert rfcn["rpn_conv/3x3"][0] == (512, 1024, 3, 3)
    assert rfcn["conv_new_1"][0] == (1024, 2048, 1, 1)
    assert rfcn["rfcn_cls"][0] == (CLASSES * 49, 1024, 1, 1)
    assert rfcn["rfcn_bbox"][0] == (8 * 49, 1024, 1, 1)
    convs = [name for name in rfcn if name.startswith("res") and "branch" in name]
    assert len(convs) == 16 * 3 + 4    # 16 bottleneck blocks and 4 projection shortcuts


def randomize(net, seed):
    """Random weights that keep activations of order one: conv and inner product weights
    N(0, 1/fan_in), BatchNorm the identity, no box regression in the RPN (so the proposals
    are the clipped anchors and many of them survive)."""
    rng = np.random.default_rng(seed)
    for name, blobs in net.params.items():
        kind = net.layer_dict[name].type
        if kind == "BatchNorm":
            for blob, value in zip(blobs, (0, 1, 1)):
                blob.data[...] = value
        elif kind == "Scale":
            blobs[0].data[...] = 1
            blobs[1].data[...] = 0
        else:
            weights = blobs[0].data
            std = 0 if name == "rpn_bbox_pred" else np.sqrt(1.0 / weights[0].size)
            weights[...] = rng.normal(0, std, weights.shape)
            for bias in blobs[1:]:
                bias.data[...] = 0


def run(path, height=200, width=300):
    net = caffe.Net(path, caffe.TEST)
    randomize(net, seed=7)
    image = np.random.default_rng(8).normal(0, 40, (1, 3, height, width)).astype(np.float32)
    net.blobs["data"].reshape(*image.shape)
    return net.forward(data=image, im_info=np.array([[height, width, 1.0]], np.float32)), net


def check_outputs(out, net, box_columns):
    rois = net.blobs["rois"].data
    count = rois.shape[0]
    assert 50 < count <= 300             # TEST keeps at most 300 proposals
    assert rois.shape == (count, 5) and np.all(rois[:, 0] == 0)
    assert np.all(rois[:, 1] <= rois[:, 3]) and np.all(rois[:, 3] <= 299)
    assert out["cls_prob"].shape == (count, CLASSES)
    np.testing.assert_allclose(out["cls_prob"].sum(axis=1), 1, rtol=1e-5)
    assert out["bbox_pred"].shape == (count, box_columns)
    assert np.isfinite(out["bbox_pred"]).all()


@pytest.mark.slow
def test_faster_rcnn_zf_runs_forward(on_path):
    out, net = run(ZF)
    check_outputs(out, net, 4 * CLASSES)
    assert net.blobs["roi_pool_conv5"].data.shape == (net.blobs["rois"].shape[0], 256, 6, 6)


@pytest.mark.slow
def test_rfcn_resnet50_runs_forward(on_path):
    out, net = run(RFCN)
    check_outputs(out, net, 8)
    count = net.blobs["rois"].shape[0]
    assert net.blobs["psroipooled_cls_rois"].data.shape == (count, CLASSES, 7, 7)
    assert net.blobs["res5c"].data.shape[2:] == net.blobs["res4f"].data.shape[2:]
