"""SSD's ground-truth reading, prior matching and example mining (detection/matching.py)
against plain loop references written from the fork's MatchBBox / GetGroundTruth /
MineHardExamples."""
import numpy as np
import pytest

from pycaffe_cli.detection import matching


def iou(a, b):
    """The fork's normalized JaccardOverlap of two boxes, in float32 steps."""
    a, b = np.float32(a), np.float32(b)
    if b[0] > a[2] or b[2] < a[0] or b[1] > a[3] or b[3] < a[1]:
        return np.float32(0)
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if not (w > 0 and h > 0):
        return np.float32(0)

    def size(box):
        return np.float32(0) if box[2] < box[0] or box[3] < box[1] else (
            (box[2] - box[0]) * (box[3] - box[1]))
    inter = w * h
    return inter / (size(a) + size(b) - inter)


def reference_match(gt, pred, match_type, threshold, ignore_cross=False):
    """MatchBBox with a dict of overlaps, as the fork loops over it."""
    indices = [-1] * len(pred)
    best = [0.0] * len(pred)
    overlaps = {}
    for i, box in enumerate(pred):
        if ignore_cross and any(v < 0 or v > 1 for v in box):
            indices[i] = -2
            continue
        for j, g in enumerate(gt):
            o = iou(box, g)
            if o > 1e-6:
                best[i] = max(best[i], o)
                overlaps.setdefault(i, {})[j] = o
    pool = list(range(len(gt)))
    while pool:
        top, top_i, top_j = -1, -1, -1
        for i in sorted(overlaps):
            if indices[i] != -1:
                continue
            for j in pool:
                if j in overlaps[i] and overlaps[i][j] > top:
                    top, top_i, top_j = overlaps[i][j], i, j
        if top_i == -1:
            break
        indices[top_i], best[top_i] = top_j, top
        pool.remove(top_j)
    if match_type == matching.PER_PREDICTION:
        for i in sorted(overlaps):
            if indices[i] != -1:
                continue
            top, top_j = -1, -1
            for j in range(len(gt)):
                o = overlaps[i].get(j)
                if o is not None and o >= threshold and o > top:
                    top, top_j = o, j
            if top_j != -1:
                indices[i], best[i] = top_j, top
    return np.array(indices), np.array(best, np.float32)


def random_boxes(rng, n, low=-0.1, high=1.1):
    corners = rng.uniform(low, high, size=(n, 2, 2))
    corners.sort(axis=1)
    return corners.transpose(0, 2, 1).reshape(n, 4)[:, [0, 2, 1, 3]].astype(np.float32)


@pytest.mark.parametrize("match_type", [matching.BIPARTITE, matching.PER_PREDICTION])
@pytest.mark.parametrize("seed, num_gt, threshold, ignore", [
    (0, 3, 0.5, False), (1, 5, 0.3, False), (2, 1, 0.1, True), (3, 4, 0.2, True),
    (4, 0, 0.5, False)])
def test_match_boxes_against_loops(match_type, seed, num_gt, threshold, ignore):
    rng = np.random.default_rng(seed)
    pred = random_boxes(rng, 40)
    gt = random_boxes(rng, num_gt, 0.0, 1.0)
    got_idx, got_ov = matching.match_boxes(gt, pred, match_type, threshold, ignore)
    want_idx, want_ov = reference_match(gt, pred, match_type, threshold, ignore)
    np.testing.assert_array_equal(got_idx, want_idx)
    np.testing.assert_allclose(got_ov, want_ov, rtol=1e-6, atol=0)
    assert got_idx.dtype == np.int32 and got_ov.dtype == np.float32


def test_bipartite_takes_the_best_pair_first_and_ties_go_to_the_lowest_index():
    gt = np.array([[0.0, 0.0, 0.5, 0.5], [0.5, 0.5, 1.0, 1.0]], np.float32)
    pred = np.array([[0.0, 0.0, 0.5, 0.5], [0.0, 0.0, 0.5, 0.5], [0.0, 0.0, 0.5, 0.4],
                     [0.5, 0.5, 1.0, 0.9]], np.float32)
    idx, ov = matching.match_boxes(gt, pred, matching.BIPARTITE, 0.5)
    np.testing.assert_array_equal(idx, [0, -1, -1, 1])
    np.testing.assert_allclose(ov, [1, 1, 0.8, 0.8], rtol=1e-6)
    idx, _ = matching.match_boxes(gt, pred, matching.PER_PREDICTION, 0.5)
    np.testing.assert_array_equal(idx, [0, 0, 0, 1])
    idx, _ = matching.match_boxes(gt, pred, matching.PER_PREDICTION, 0.9)
    np.testing.assert_array_equal(idx, [0, 0, -1, 1])


def test_cross_boundary_predictions_are_ignored():
    gt = np.array([[0.0, 0.0, 0.5, 0.5]], np.float32)
    pred = np.array([[-0.01, 0.0, 0.5, 0.5], [0.0, 0.0, 0.4, 0.5]], np.float32)
    idx, ov = matching.match_boxes(gt, pred, matching.PER_PREDICTION, 0.5, True)
    np.testing.assert_array_equal(idx, [-2, 0])
    np.testing.assert_allclose(ov, [0, 0.8], rtol=1e-6)
    idx, _ = matching.match_boxes(gt, pred, matching.PER_PREDICTION, 0.5, False)
    np.testing.assert_array_equal(idx, [0, 0])


def test_read_ground_truth_skips_padding_and_difficult_rows():
    rows = np.array([
        [0, 1, 0, 0.1, 0.1, 0.2, 0.2, 0],
        [-1, 0, 0, 0, 0, 0, 0, 0],
        [2, 2, 0, 0.3, 0.3, 0.5, 0.5, 1],
        [0, 3, 1, 0.4, 0.4, 0.6, 0.7, 1],
        [2, 1, 0, 0.5, 0.5, 0.9, 0.9, 0],
        [5, 1, 0, 0.5, 0.5, 0.9, 0.9, 0],   # an item beyond the batch is never looked at
    ], np.float32).reshape(1, 1, -1, 8)
    truths = matching.read_ground_truth(rows, 3, 0, True)
    assert truths[1] is None
    np.testing.assert_array_equal(truths[0].labels, [1, 3])
    np.testing.assert_allclose(truths[0].boxes, rows[0, 0, [0, 3], 3:7])
    np.testing.assert_array_equal(truths[2].labels, [2, 1])
    np.testing.assert_array_equal(truths[2].difficult, [True, False])
    truths = matching.read_ground_truth(rows, 3, 0, False)
    np.testing.assert_array_equal(truths[0].labels, [1])
    np.testing.assert_array_equal(truths[2].labels, [1])


def test_read_ground_truth_refuses_the_background_label():
    rows = np.array([[0, 1, 0, 0.1, 0.1, 0.2, 0.2, 0], [1, 0, 0, 0.1, 0.1, 0.2, 0.2, 1]])
    with pytest.raises(ValueError, match="background label 0"):
        matching.read_ground_truth(rows, 2, 0, False)   # difficult or not: refused
    assert len(matching.read_ground_truth(rows, 2, 5, True)) == 2


def test_read_priors():
    boxes = np.arange(12, dtype=np.float32).reshape(3, 4)
    variances = boxes + 100
    got = matching.read_priors(np.concatenate([boxes.ravel(), variances.ravel()]), 3)
    np.testing.assert_array_equal(got[0], boxes)
    np.testing.assert_array_equal(got[1], variances)


def test_max_negative_mining_picks_the_largest_losses_below_neg_overlap():
    match = np.array([0, -1, -1, -1, 1, -1, -2], np.int32)
    overlaps = np.array([0.7, 0.1, 0.6, 0.2, 0.8, 0.0, 0.0], np.float32)
    losses = np.array([9, 1, 8, 3, 9, 2, 7], np.float32)
    got, negatives = matching.mine_image(match, overlaps, losses, matching.MAX_NEGATIVE,
                                         1.0, 0.5, 64)
    np.testing.assert_array_equal(got, match)
    np.testing.assert_array_equal(negatives, [3, 5])   # 2: overlap 0.6; 6: ignored
    _, negatives = matching.mine_image(match, overlaps, losses, matching.MAX_NEGATIVE,
                                       1.4, 0.5, 64)   # int(2 * 1.4) = 2
    np.testing.assert_array_equal(negatives, [3, 5])
    _, negatives = matching.mine_image(match, overlaps, losses, matching.MAX_NEGATIVE,
                                       3.0, 0.5, 64)
    np.testing.assert_array_equal(negatives, [1, 3, 5])


def test_hard_example_mining_drops_unselected_positives():
    match = np.array([0, -1, -1, -1, 1, -1, -2], np.int32)
    overlaps = np.zeros(7, np.float32)
    losses = np.array([9, 1, 8, 3, 2, 5, 7], np.float32)
    got, negatives = matching.mine_image(match, overlaps, losses, matching.HARD_EXAMPLE,
                                         3.0, 0.5, 4)
    np.testing.assert_array_equal(got, [0, -1, -1, -1, -1, -1, -2])
    np.testing.assert_array_equal(negatives, [2, 5])   # 6 (ignored) is picked but no negative


def test_mining_with_nms_suppresses_overlapping_candidates():
    boxes = np.array([[0, 0, 0.5, 0.5], [0, 0, 0.5, 0.45], [0.5, 0.5, 1, 1],
                      [0.6, 0.6, 0.6, 0.6], [0.0, 0.5, 0.5, 1.0]], np.float32)
    match = np.full(5, -1, np.int32)
    match[4] = 0
    losses = np.array([5, 6, 4, 9, 1], np.float32)
    overlaps = np.zeros(5, np.float32)
    # box 3 has no area (dropped), box 0 overlaps box 1 (suppressed)
    _, negatives = matching.mine_image(match, overlaps, losses, matching.MAX_NEGATIVE, 3.0,
                                       0.5, 64, (boxes, 0.45, -1))
    np.testing.assert_array_equal(negatives, [1, 2])
    _, negatives = matching.mine_image(match, overlaps, losses, matching.MAX_NEGATIVE, 3.0,
                                       0.5, 64, (boxes, 0.45, 1))   # top_k counts box 3
    np.testing.assert_array_equal(negatives, [])
    np.testing.assert_array_equal(
        matching.suppress_by_loss(boxes, losses, 0.45, 0), [])   # the fork's top_k 0
