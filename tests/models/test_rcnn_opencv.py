"""Faster R-CNN (ZF) and R-FCN (ResNet-50) forward passes against OpenCV DNN's, same random
weights and image.

OpenCV runs these nets with a proposal layer of its own (type "Proposal", which has no
min_size filter and pads its output to post_nms_topN boxes), not py-faster-rcnn's Python
layer that pycaffe runs; the two give different proposals, and py-faster-rcnn's is the
reference for ours (tests/models/test_rpn_proposal_layer.py). So OpenCV gets our proposals as
an input instead of its own: everything before the proposals (the RPN's outputs) and after
them (the per-roi class scores and box deltas) must agree within 1e-4 of each output's
largest value.

R-FCN's ResNet-50 with random weights amplifies rounding differences about a thousandfold
(measured against OpenCV: 5.6e-7 after conv1, 1.5e-4 at res4f, 5e-4 at the RPN's softmax,
with or without OpenCV's layer fusion), so two correct float32 runtimes differ there by more
than 1e-4 at the end. Its check is made layer by layer instead: every layer (with the in-place
layers after it) run on OpenCV's values of its bottoms must give OpenCV's top within the
per-layer bound of the inference plan's accuracy promise (2e-5 of the largest value).
"""
import os
import re

import numpy as np
import pytest

from pycaffe_cli.blob import Blob
from pycaffe_cli.inference.accuracy import LAYER_BOUND, deviation, random_weights
from pycaffe_cli.net import weights as net_weights
from pycaffe_cli.net.net import Net
from pycaffe_cli.proto import caffe_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RPN_PATH = os.path.join(ROOT, "models", "faster_rcnn", "python")
FORWARD_BOUND = 1e-4
NETS = {"faster_rcnn_zf": ("test.prototxt", ("cls_prob", "bbox_pred")),
        "rfcn_resnet50": ("test_agnostic.prototxt", ("cls_prob", "bbox_pred"))}
RPN_OUTPUTS = ("rpn_cls_prob_reshape", "rpn_bbox_pred")


def last_producers(path):
    """blob -> the name of the last layer writing it (OpenCV names outputs by layer)."""
    from pycaffe_cli.io.prototxt import read_net_param
    return {top: layer.name for layer in read_net_param(path).layer for top in layer.top}


def without_proposals(text, num_rois):
    """The prototxt with the Python proposal layer replaced by an input blob "rois"."""
    text = re.sub(r'layer \{\s*name: "proposal".*?\n\}\n', "", text, flags=re.S)
    return text.replace('input: "im_info"', f'input: "rois"\ninput_shape {{\n  dim: '
                        f'{num_rois}\n  dim: 5\n}}\ninput: "im_info"', 1)


@pytest.fixture
def cv2_with_caffe(monkeypatch):
    cv2 = pytest.importorskip("cv2")
    if not hasattr(cv2.dnn, "readNetFromCaffe"):
        pytest.skip("this OpenCV has no Caffe importer (OpenCV 5 dropped it)")
    monkeypatch.syspath_prepend(RPN_PATH)
    return cv2


def random_net(name, tmp_path):
    """(net with random weights run forward on a random image, its file, the weights file)."""
    filename, _ = NETS[name]
    path = os.path.join(ROOT, "models", name, filename)
    rng = np.random.default_rng(0)
    net = Net.from_file(path, caffe_pb2.TEST)
    data, info = net.input_blobs
    data.data[...] = rng.standard_normal(data.shape)
    info.data[...] = [[data.shape[2], data.shape[3], 1.0]]
    random_weights(net, rng)
    weights = str(tmp_path / "random.caffemodel")
    net_weights.save_binaryproto(net, weights)
    net.forward()
    return net, path, weights


def opencv_net(cv2, net, path, weights, tmp_path):
    """OpenCV's net of ``path`` with our proposals as the input "rois", inputs set."""
    rois = net.blob_by_name("rois").data.copy()
    assert len(rois) > 1
    data, info = net.input_blobs
    with open(path) as f:
        cv_model = tmp_path / "opencv.prototxt"
        cv_model.write_text(without_proposals(f.read(), len(rois)))
    reference = cv2.dnn.readNetFromCaffe(str(cv_model), weights)
    reference.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    for blob, value in (("data", data.data), ("im_info", info.data), ("rois", rois)):
        reference.setInput(np.ascontiguousarray(value), blob)
    return reference


def test_faster_rcnn_outputs_are_opencvs_for_the_same_proposals(tmp_path, cv2_with_caffe):
    net, path, weights = random_net("faster_rcnn_zf", tmp_path)
    reference = opencv_net(cv2_with_caffe, net, path, weights, tmp_path)
    names = RPN_OUTPUTS + NETS["faster_rcnn_zf"][1]
    producers = last_producers(path)
    for blob, theirs in zip(names, reference.forward([producers[n] for n in names])):
        ours = net.blob_by_name(blob).data
        assert deviation(ours.reshape(theirs.shape), theirs) <= FORWARD_BOUND, blob


def units(path):
    """The layers of ``path`` after the inputs, in order, grouped into (layer names, bottom
    blobs, top blob): a layer with the in-place layers that follow it on its top."""
    from pycaffe_cli.io.prototxt import read_net_param
    groups = []
    for layer in read_net_param(path).layer:
        in_place = len(layer.top) == 1 and list(layer.bottom) == list(layer.top)
        if in_place and groups and groups[-1][2] == layer.top[0]:
            groups[-1][0].append(layer.name)
        elif len(layer.top) == 1:
            groups.append(([layer.name], list(layer.bottom), layer.top[0]))
    return groups


@pytest.mark.slow
def test_rfcn_layers_are_opencvs_on_opencvs_inputs(tmp_path, cv2_with_caffe):
    net, path, weights = random_net("rfcn_resnet50", tmp_path)
    reference = opencv_net(cv2_with_caffe, net, path, weights, tmp_path)
    groups = [g for g in units(path) if g[0][0] != "proposal"]
    values = dict(zip([g[0][-1] for g in groups], reference.forward([g[0][-1] for g in groups])))
    current = {"data": net.input_blobs[0].data, "im_info": net.input_blobs[1].data,
               "rois": net.blob_by_name("rois").data}
    checked = 0
    for names, bottoms, top in groups:
        blobs = [Blob(current[b].shape) for b in bottoms]
        for blob, name in zip(blobs, bottoms):
            blob.data[...] = current[name]
        out = blobs
        for name in names:
            layer = net.layer_by_name(name)
            result = [Blob()]
            layer.reshape(out, result)
            layer.forward(out, result)
            out = result
        theirs = values[names[-1]]
        assert deviation(out[0].data.reshape(theirs.shape), theirs) <= LAYER_BOUND, names
        current[top] = theirs.reshape(out[0].shape)
        checked += 1
    assert checked == len(groups) > 80   # every layer but the proposals
