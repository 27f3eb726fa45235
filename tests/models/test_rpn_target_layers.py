"""models/faster_rcnn/python/rpn: py-faster-rcnn's training layers AnchorTargetLayer and
ProposalTargetLayer, against loop-by-loop references where nothing is drawn at random, and
their sampling limits where something is."""
import os

import numpy as np
import pytest

import caffe
from tests.models.test_rpn_proposal_layer import KNOWN_ANCHORS, iou

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RPN_PATH = os.path.join(ROOT, "models", "faster_rcnn", "python")
GT = np.array([[20, 30, 150, 140, 3], [160, 40, 300, 200, 7]], dtype=np.float32)


@pytest.fixture
def on_path(monkeypatch):
    monkeypatch.syspath_prepend(RPN_PATH)


def deltas(box, gt):
    w, h = box[2] - box[0] + 1, box[3] - box[1] + 1
    gw, gh = gt[2] - gt[0] + 1, gt[3] - gt[1] + 1
    return [(gt[0] + gw / 2 - box[0] - w / 2) / w, (gt[1] + gh / 2 - box[1] - h / 2) / h,
            np.log(gw / w), np.log(gh / h)]


def anchor_net(write, rows, cols, param_str):
    return write("anchors.prototxt", f"""
        input: "score" input_shape {{ dim: 1 dim: 18 dim: {rows} dim: {cols} }}
        input: "gt" input_shape {{ dim: {len(GT)} dim: 5 }}
        input: "info" input_shape {{ dim: 1 dim: 3 }}
        layer {{ name: "rpn-data" type: "Python" bottom: "score" bottom: "gt" bottom: "info"
          top: "labels" top: "targets" top: "inside" top: "outside"
          python_param {{ module: "rpn.anchor_target_layer" layer: "AnchorTargetLayer"
                         param_str: "{param_str}" }} }}
        """)


def reference_anchor_targets(rows, cols, im_h, im_w, border):
    """Labels, targets, inside and outside weights as (A, H, W) / (4A, H, W) arrays, with no
    subsampling, from loops over cells and anchors."""
    count = len(KNOWN_ANCHORS)
    boxes = {}
    for y in range(rows):
        for x in range(cols):
            for a in range(count):
                box = KNOWN_ANCHORS[a] + [16 * x, 16 * y] * 2
                if (box[0] >= -border and box[1] >= -border and box[2] < im_w + border
                        and box[3] < im_h + border):
                    boxes[a, y, x] = box
    ious = {key: [iou(box, gt) for gt in GT] for key, box in boxes.items()}
    best_per_gt = [max(values[g] for values in ious.values()) for g in range(len(GT))]
    labels = np.full((count, rows, cols), -1.0)
    targets = np.zeros((4 * count, rows, cols))
    for (a, y, x), values in ious.items():
        if max(values) < 0.3:
            labels[a, y, x] = 0
        if max(values) >= 0.7 or any(v == b for v, b in zip(values, best_per_gt)):
            labels[a, y, x] = 1
        targets[4 * a:4 * a + 4, y, x] = deltas(boxes[a, y, x], GT[int(np.argmax(values))])
    inside = np.repeat(labels == 1, 4, axis=0).astype(float)
    outside = np.repeat(labels >= 0, 4, axis=0) / np.sum(labels >= 0)
    return labels, targets, inside, outside


def test_anchor_targets_match_the_reference(write, on_path):
    rows, cols, im_h, im_w = 14, 20, 224.0, 320.0
    net = caffe.Net(anchor_net(write, rows, cols, "'feat_stride': 16, 'allowed_border': 8, "
                                                  "'batchsize': 100000, 'fg_fraction': 1"),
                    caffe.TRAIN)
    out = net.forward(score=net.blobs["score"].data, gt=GT,
                      info=np.array([[im_h, im_w, 1]], np.float32))
    labels, targets, inside, outside = reference_anchor_targets(rows, cols, im_h, im_w, 8)
    assert out["labels"].shape == (1, 1, 9 * rows, cols)
    np.testing.assert_array_equal(out["labels"].reshape(9, rows, cols), labels)
    assert np.sum(labels == 1) >= len(GT) and np.sum(labels == 0) > 0
    # float32 deltas of order one
    np.testing.assert_allclose(out["targets"][0], targets, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(out["inside"][0], inside)
    np.testing.assert_allclose(out["outside"][0], outside, rtol=1e-6)


def test_anchor_labels_are_subsampled(write, on_path):
    np.random.seed(4)
    net = caffe.Net(anchor_net(write, 14, 20, "'feat_stride': 16, 'batchsize': 20, "
                                              "'fg_fraction': 0.1"), caffe.TRAIN)
    labels = net.forward(score=net.blobs["score"].data, gt=GT,
                         info=np.array([[224, 320, 1]], np.float32))["labels"]
    assert np.sum(labels == 1) == 2 and np.sum(labels == 0) == 18


def proposal_target_net(write, rois, param_str):
    return write("targets.prototxt", f"""
        input: "rois" input_shape {{ dim: {len(rois)} dim: 5 }}
        input: "gt" input_shape {{ dim: {len(GT)} dim: 5 }}
        layer {{ name: "roi-data" type: "Python" bottom: "rois" bottom: "gt"
          top: "r" top: "labels" top: "targets" top: "inside" top: "outside"
          python_param {{ module: "rpn.proposal_target_layer" layer: "ProposalTargetLayer"
                         param_str: "{param_str}" }} }}
        """)


def random_rois(count, seed):
    rng = np.random.default_rng(seed)
    corners = rng.uniform(0, 250, (count, 2))
    sizes = rng.uniform(20, 160, (count, 2))
    return np.hstack([np.zeros((count, 1)), corners, corners + sizes]).astype(np.float32)


def test_proposal_targets_match_the_reference(write, on_path):
    rois = random_rois(60, seed=2)
    net = caffe.Net(proposal_target_net(write, rois, "'num_classes': 9, 'batch_size': 1000, "
                                                     "'fg_fraction': 1"), caffe.TRAIN)
    out = net.forward(rois=rois, gt=GT)
    candidates = np.vstack([rois, np.hstack([np.zeros((2, 1)), GT[:, :4]])])
    expected = {}
    for roi in candidates:
        values = [iou(roi[1:], gt) for gt in GT]
        if max(values) >= 0.5 or 0.1 <= max(values) < 0.5:
            best = GT[int(np.argmax(values))]
            label = int(best[4]) if max(values) >= 0.5 else 0
            row = np.zeros(36)
            if label:
                row[4 * label:4 * label + 4] = np.array(deltas(roi[1:], best)) / [.1, .1, .2, .2]
            expected[tuple(roi)] = (label, row)
    got = {tuple(roi): (label, target)
           for roi, label, target in zip(out["r"], out["labels"], out["targets"])}
    assert set(got) == set(expected) and len(out["r"]) == len(expected)
    labels = out["labels"]
    assert np.all(labels[:np.sum(labels > 0)] > 0)       # objects first
    for key, (label, row) in expected.items():
        assert got[key][0] == label
        np.testing.assert_allclose(got[key][1], row, rtol=0, atol=1e-4)
    inside = np.zeros((len(labels), 36))
    for row, label in enumerate(labels.astype(int)):
        inside[row, 4 * label:4 * label + 4] = label > 0
    assert np.sum(labels > 0) >= len(GT)      # the ground-truth boxes themselves at least
    np.testing.assert_array_equal(out["inside"], inside)
    np.testing.assert_array_equal(out["outside"], inside)


def test_proposal_targets_are_subsampled(write, on_path):
    np.random.seed(9)
    rois = random_rois(300, seed=3)
    net = caffe.Net(proposal_target_net(write, rois, "'num_classes': 9, 'batch_size': 16"),
                    caffe.TRAIN)
    out = net.forward(rois=rois, gt=GT)
    labels = out["labels"]
    assert labels.shape == (16,) and out["targets"].shape == (16, 36)
    assert np.sum(labels > 0) == 4 and set(labels[4:]) == {0}
