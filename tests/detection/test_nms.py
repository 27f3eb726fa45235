"""SSD's ApplyNMSFast: an independent loop reference, the fork's overlap numbers, ties, top_k,
the score threshold and the adaptive threshold (eta)."""
import numpy as np
import pytest

from pycaffe_cli.detection.nms import nms_indices


def reference_iou(a, b):
    """Normalized intersection over union, in float64."""
    if b[0] > a[2] or b[2] < a[0] or b[1] > a[3] or b[3] < a[1]:
        return 0.0
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0

    def area(box):
        return 0.0 if box[2] < box[0] or box[3] < box[1] else (box[2] - box[0]) * (box[3] - box[1])
    return w * h / (area(a) + area(b) - w * h)


def reference_nms(boxes, scores, score_threshold, nms_threshold, eta=1.0, top_k=-1):
    boxes = np.asarray(boxes, np.float64)
    candidates = [i for i in range(len(scores)) if scores[i] > score_threshold]
    candidates.sort(key=lambda i: -scores[i])  # Python's sort is stable
    if top_k > -1:
        candidates = candidates[:top_k]
    kept, threshold = [], nms_threshold
    for i in candidates:
        if all(reference_iou(boxes[i], boxes[k]) <= threshold for k in kept):
            kept.append(i)
            if eta < 1 and threshold > 0.5:
                threshold *= eta
    return kept


def random_boxes(rng, n):
    lo = rng.uniform(0, 0.7, (n, 2))
    size = rng.uniform(0.05, 0.3, (n, 2))
    return np.concatenate([lo, lo + size], 1).astype(np.float32)


@pytest.mark.parametrize("score_threshold, nms_threshold, eta, top_k", [
    (0.0, 0.45, 1.0, -1), (0.3, 0.3, 1.0, -1), (-1.0, 0.6, 1.0, 20), (0.1, 0.9, 0.8, -1),
    (0.1, 0.0, 1.0, -1), (0.5, 1.0, 1.0, 0)])
def test_matches_the_reference(score_threshold, nms_threshold, eta, top_k):
    rng = np.random.default_rng(3)
    boxes = random_boxes(rng, 200)
    scores = rng.permutation(np.linspace(0, 1, 200)).astype(np.float32)
    got = nms_indices(boxes, scores, score_threshold, nms_threshold, eta, top_k)
    assert got.dtype == np.int64
    assert got.tolist() == reference_nms(boxes, scores, score_threshold, nms_threshold,
                                         eta, top_k)


def test_the_forks_overlaps_decide():
    # test_bbox_util.cpp's TestJaccardOverlap: 1/7 (partial), 2/15 (contained), 0 (apart)
    first = [0.2, 0.3, 0.3, 0.5]
    for other, overlap in [([0.1, 0.1, 0.3, 0.4], 1 / 7), ([0.1, 0.1, 0.4, 0.6], 2 / 15),
                           ([0, 0, 0.1, 0.1], 0.0)]:
        boxes = [first, other]
        assert nms_indices(boxes, [0.9, 0.8], 0, overlap + 1e-4).tolist() == [0, 1]
        if overlap > 0:
            assert nms_indices(boxes, [0.9, 0.8], 0, overlap - 1e-4).tolist() == [0]
    # touching boxes do not overlap; a threshold of 0 keeps them both
    assert nms_indices([[0, 0, 1, 1], [1, 0, 2, 1]], [0.5, 0.6], 0, 0).tolist() == [1, 0]


def test_equal_scores_keep_index_order():
    boxes = [[0.5, 0.5, 0.6, 0.6], [0, 0, 0.1, 0.1], [0.3, 0.3, 0.4, 0.4], [0.8, 0.8, 0.9, 0.9]]
    scores = [0.5, 0.7, 0.5, 0.5]
    assert nms_indices(boxes, scores, 0, 0.5).tolist() == [1, 0, 2, 3]
    # the first of equal-scored duplicates wins
    assert nms_indices([[0, 0, 1, 1]] * 3, [0.4, 0.4, 0.4], 0, 0.5).tolist() == [0]


def test_score_threshold_is_strict_and_top_k_counts_candidates():
    boxes = [[0, 0, 0.1, 0.1], [0.2, 0.2, 0.3, 0.3], [0.4, 0.4, 0.5, 0.5]]
    assert nms_indices(boxes, [0.5, 0.6, 0.4], 0.5, 0.5).tolist() == [1]
    assert nms_indices(boxes, [0.5, 0.6, 0.4], 0.5, 0.5, top_k=0).tolist() == []
    # top_k cuts before suppression: 2 candidates, one suppressed, one kept
    dup = [[0, 0, 1, 1], [0, 0, 1, 1], [0.5, 0.5, 0.6, 0.6]]
    assert nms_indices(dup, [0.9, 0.8, 0.7], 0, 0.5, top_k=2).tolist() == [0]


def test_eta_lowers_the_threshold_after_each_kept_box():
    # box 1 overlaps box 0 by 0.6; box 2 overlaps box 0 by 0.6 too (IoU = 0.6 each)
    boxes = [[0, 0, 1, 1], [0, 0, 1, 0.6], [0, 0.4, 1, 1], [2, 2, 3, 3]]
    scores = [0.9, 0.1, 0.5, 0.8]
    assert nms_indices(boxes, scores, 0, 0.7).tolist() == [0, 3, 2, 1]
    # 0.7 -> 0.63 after box 0 -> 0.567 after box 3: box 2 (0.6 with box 0) goes, then box 1
    assert nms_indices(boxes, scores, 0, 0.7, eta=0.9).tolist() == [0, 3]
    # below 0.5 the threshold stops shrinking
    got = nms_indices(random_boxes(np.random.default_rng(1), 50),
                      np.linspace(1, 0, 50, dtype=np.float32), -1, 0.55, 0.5)
    assert got.tolist() == reference_nms(random_boxes(np.random.default_rng(1), 50),
                                         np.linspace(1, 0, 50, dtype=np.float32), -1, 0.55,
                                         0.5)


def test_empty_and_mismatched_inputs():
    assert nms_indices(np.zeros((0, 4)), np.zeros(0), 0, 0.5).tolist() == []
    assert nms_indices([[0, 0, 1, 1]], [0.1], 0.5, 0.5).dtype == np.int64
    with pytest.raises(ValueError, match="one score per box"):
        nms_indices([[0, 0, 1, 1]], [0.1, 0.2], 0, 0.5)
