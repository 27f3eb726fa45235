"""SSD's greedy non-maximum suppression (ApplyNMSFast in src/caffe/util/bbox_util.cpp).

The boxes whose score is above ``score_threshold`` are visited in descending score order
(a stable sort, so equal scores keep their index order, as the fork's std::stable_sort), the
first ``top_k`` of them when ``top_k`` > -1. A box is kept when its overlap (SSD's
normalized JaccardOverlap, ``boxes.jaccard_overlaps``) with every box kept before it is at
most the threshold; with ``eta`` < 1 the threshold is multiplied by ``eta`` after each kept
box while it is above 0.5 (adaptive NMS).
"""
import numpy as np
from numba import njit


def nms_indices(boxes, scores, score_threshold, nms_threshold, eta=1.0, top_k=-1):
    """Indices (int64, in the order they were kept: descending score) of the boxes that
    survive NMS."""
    boxes = np.ascontiguousarray(boxes, np.float32).reshape(-1, 4)
    scores = np.asarray(scores, np.float32).reshape(-1)
    if len(boxes) != len(scores):
        raise ValueError("nms_indices needs one score per box, got %d scores for %d boxes"
                         % (len(scores), len(boxes)))
    candidates = np.flatnonzero(scores > np.float32(score_threshold))
    order = candidates[np.argsort(-scores[candidates], kind="stable")]
    if -1 < top_k < len(order):
        order = order[:top_k]
    return _suppress(boxes, order.astype(np.int64), np.float32(nms_threshold),
                     np.float32(eta))


@njit(cache=True)
def _overlap(boxes, a, b):
    """SSD's normalized JaccardOverlap of boxes[a] and boxes[b], in float32."""
    zero = np.float32(0)
    if (boxes[b, 0] > boxes[a, 2] or boxes[b, 2] < boxes[a, 0]
            or boxes[b, 1] > boxes[a, 3] or boxes[b, 3] < boxes[a, 1]):
        return zero
    width = min(boxes[a, 2], boxes[b, 2]) - max(boxes[a, 0], boxes[b, 0])
    height = min(boxes[a, 3], boxes[b, 3]) - max(boxes[a, 1], boxes[b, 1])
    if not (width > zero and height > zero):
        return zero
    intersection = width * height
    union = _size(boxes, a) + _size(boxes, b) - intersection
    return intersection / union


@njit(cache=True)
def _size(boxes, i):
    width = boxes[i, 2] - boxes[i, 0]
    height = boxes[i, 3] - boxes[i, 1]
    if width < 0 or height < 0:
        return np.float32(0)
    return width * height


@njit(cache=True)
def _suppress(boxes, order, threshold, eta):
    kept = np.empty(len(order), np.int64)
    num_kept = 0
    half = np.float32(0.5)
    one = np.float32(1)
    for idx in order:
        keep = True
        for k in range(num_kept):
            if not _overlap(boxes, idx, kept[k]) <= threshold:
                keep = False
                break
        if keep:
            kept[num_kept] = idx
            num_kept += 1
            if eta < one and threshold > half:
                threshold = np.float32(threshold * eta)
    return kept[:num_kept].copy()
