"""models/faster_rcnn/python/rpn: py-faster-rcnn's anchors and ProposalLayer, against the
anchors py-faster-rcnn prints and a loop-by-loop numpy reference of the proposal steps."""
import os
import sys

import numpy as np
import pytest

import caffe

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RPN_PATH = os.path.join(ROOT, "models", "faster_rcnn", "python")

# py-faster-rcnn's generate_anchors() for base 16, ratios 0.5/1/2, scales 8/16/32 (its
# printed output; the matlab anchors its comment quotes are these plus one).
KNOWN_ANCHORS = np.array([
    [-84, -40, 99, 55], [-176, -88, 191, 103], [-360, -184, 375, 199],
    [-56, -56, 71, 71], [-120, -120, 135, 135], [-248, -248, 263, 263],
    [-36, -80, 51, 95], [-80, -168, 95, 183], [-168, -344, 183, 359]], dtype=np.float64)


@pytest.fixture(scope="module")
def rpn():
    sys.path.insert(0, RPN_PATH)
    try:
        import rpn.proposal_layer
        yield rpn
    finally:
        sys.path.remove(RPN_PATH)


@pytest.fixture
def on_path(monkeypatch):
    monkeypatch.syspath_prepend(RPN_PATH)


def test_anchors_are_py_faster_rcnns(rpn):
    from rpn.generate_anchors import generate_anchors
    np.testing.assert_array_equal(generate_anchors(), KNOWN_ANCHORS)
    assert generate_anchors(scales=(8,), ratios=(1,)).tolist() == [[-56, -56, 71, 71]]


@pytest.mark.parametrize("text,expected", [
    ("'feat_stride': 16", {"feat_stride": 16}),
    ("{'feat_stride': 8, 'scales': (4, 8)}", {"feat_stride": 8, "scales": (4, 8)}),
    ("feat_stride: 16, ratios: [1, 2]", {"feat_stride": 16, "ratios": [1, 2]}),
    ("feat_stride: 32\npost_nms_topN: 50\n", {"feat_stride": 32, "post_nms_topN": 50}),
    ("", {}),
])
def test_param_str_is_read_without_yaml(rpn, text, expected):
    from rpn.params import parse_param_str
    assert parse_param_str(text) == expected


# --- an independent reference: one anchor, one cell at a time --------------------------------
def reference_proposals(scores, deltas, im_info, stride, pre, post, thresh, min_size):
    """(boxes, scores) for scores (1, 2A, H, W), deltas (1, 4A, H, W), in float64 loops."""
    count = KNOWN_ANCHORS.shape[0]
    height, width = scores.shape[2:]
    found = []
    for y in range(height):
        for x in range(width):
            for a in range(count):
                x1, y1, x2, y2 = KNOWN_ANCHORS[a] + [x * stride, y * stride] * 2
                w, h = x2 - x1 + 1, y2 - y1 + 1
                cx, cy = x1 + w / 2, y1 + h / 2
                dx, dy, dw, dh = (float(deltas[0, 4 * a + k, y, x]) for k in range(4))
                cx, cy, w, h = cx + dx * w, cy + dy * h, w * np.exp(dw), h * np.exp(dh)
                box = [min(max(v, 0), limit - 1) for v, limit in
                       zip((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2),
                           (im_info[1], im_info[0]) * 2)]
                side = min(box[2] - box[0] + 1, box[3] - box[1] + 1)
                if side >= min_size * im_info[2]:
                    found.append((float(scores[0, count + a, y, x]), box))
    found.sort(key=lambda item: -item[0])
    found = found[:pre]
    kept = []
    for score, box in found:
        if all(iou(box, other) <= thresh for _, other in kept):
            kept.append((score, box))
    kept = kept[:post]
    return np.array([b for _, b in kept]).reshape(-1, 4), np.array([s for s, _ in kept])


def iou(a, b):
    inter_w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]) + 1)
    inter_h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]) + 1)
    inter = inter_w * inter_h
    area = (a[2] - a[0] + 1) * (a[3] - a[1] + 1) + (b[2] - b[0] + 1) * (b[3] - b[1] + 1)
    return inter / (area - inter)


def proposal_net(write, rows, cols, param_str, scores_top=True):
    tops = 'top: "rois"' + (' top: "scores"' if scores_top else "")
    return write("proposal.prototxt", f"""
        input: "cls_prob" input_shape {{ dim: 1 dim: 18 dim: {rows} dim: {cols} }}
        input: "bbox_pred" input_shape {{ dim: 1 dim: 36 dim: {rows} dim: {cols} }}
        input: "im_info" input_shape {{ dim: 1 dim: 3 }}
        layer {{ name: "proposal" type: "Python" bottom: "cls_prob" bottom: "bbox_pred"
          bottom: "im_info" {tops}
          python_param {{ module: "rpn.proposal_layer" layer: "ProposalLayer"
                         param_str: "{param_str}" }} }}
        """)


def random_inputs(rows, cols, seed):
    rng = np.random.default_rng(seed)
    scores = rng.random((1, 18, rows, cols), dtype=np.float32)
    deltas = rng.normal(0, 0.3, (1, 36, rows, cols)).astype(np.float32)
    return scores, deltas


@pytest.mark.parametrize("extra,settings", [
    ("", (6000, 300, 0.7, 16)),                                       # py-faster-rcnn TEST
    (", 'pre_nms_topN': 40, 'post_nms_topN': 12, 'nms_thresh': 0.5, 'min_size': 8",
     (40, 12, 0.5, 8)),
])
def test_proposals_match_the_reference(write, on_path, extra, settings):
    rows, cols = 4, 5
    net = caffe.Net(proposal_net(write, rows, cols, "'feat_stride': 16" + extra), caffe.TEST)
    scores, deltas = random_inputs(rows, cols, seed=3)
    im_info = np.array([[70.0, 90.0, 0.6]], dtype=np.float32)
    out = net.forward(cls_prob=scores, bbox_pred=deltas, im_info=im_info)
    boxes, kept = reference_proposals(scores, deltas, im_info[0], 16, *settings)
    assert 0 < len(kept) < rows * cols * 9
    assert out["rois"].shape == (len(kept), 5) and out["scores"].shape == (len(kept), 1)
    assert np.all(out["rois"][:, 0] == 0)
    # float32 arithmetic on coordinates of a few hundred pixels: a few ulps of 512.
    np.testing.assert_allclose(out["rois"][:, 1:], boxes, rtol=0, atol=2e-4)
    np.testing.assert_array_equal(out["scores"][:, 0], kept.astype(np.float32))


def test_proposal_count_follows_the_image(write, on_path):
    """The rois top is reshaped in forward: a second image gives a different count."""
    net = caffe.Net(proposal_net(write, 3, 3, "'feat_stride': 16", scores_top=False),
                    caffe.TEST)
    scores, deltas = random_inputs(3, 3, seed=5)
    counts = set()
    for im_info in ([[48.0, 48.0, 1.0]], [[48.0, 48.0, 0.25]]):
        out = net.forward(cls_prob=scores, bbox_pred=deltas,
                          im_info=np.array(im_info, dtype=np.float32))
        counts.add(out["rois"].shape[0])
    assert len(counts) == 2


def test_settings_follow_the_phase(write, on_path):
    path = proposal_net(write, 2, 2, "'feat_stride': 16")
    expected = {caffe.TRAIN: (12000, 2000, 0.7, 16), caffe.TEST: (6000, 300, 0.7, 16)}
    for phase, values in expected.items():
        settings = caffe.Net(path, phase).layer_dict["proposal"].settings
        keys = ("pre_nms_topN", "post_nms_topN", "nms_thresh", "min_size")
        assert tuple(settings[key] for key in keys) == values


@pytest.mark.parametrize("param_str,message", [
    ("'feat_stride': 16, 'feat_strides': 8", "unknown param_str key.*feat_strides"),
    ("'scales': (8,)", "must give feat_stride"),
])
def test_bad_param_str_names_the_problem(write, on_path, param_str, message):
    with pytest.raises(ValueError, match=message):
        caffe.Net(proposal_net(write, 2, 2, param_str), caffe.TEST)


def test_one_image_at_a_time(write, on_path):
    path = write("batch.prototxt", """
        input: "s" input_shape { dim: 2 dim: 18 dim: 2 dim: 2 }
        input: "d" input_shape { dim: 2 dim: 36 dim: 2 dim: 2 }
        input: "i" input_shape { dim: 2 dim: 3 }
        layer { name: "p" type: "Python" bottom: "s" bottom: "d" bottom: "i" top: "r"
          python_param { module: "rpn.proposal_layer" layer: "ProposalLayer"
                         param_str: "'feat_stride': 16" } }
        """)
    net = caffe.Net(path, caffe.TEST)
    with pytest.raises(ValueError, match="one image at a time"):
        net.forward()


def test_nms_keeps_the_best_of_overlapping_boxes(rpn):
    from rpn.boxes import nms
    boxes = np.array([[0, 0, 9, 9], [1, 1, 10, 10], [20, 20, 29, 29], [5, 0, 14, 9]], float)
    scores = np.array([0.5, 0.9, 0.3, 0.7])
    # IoU (inclusive pixels): boxes 0 and 1 81/119 = 0.68; 1 and 3 54/146; 0 and 3 50/150.
    assert nms(boxes, scores, 0.7).tolist() == [1, 3, 0, 2]
    assert nms(boxes, scores, 0.6).tolist() == [1, 3, 2]
    assert nms(boxes, scores, 0.7, max_keep=2).tolist() == [1, 3]
