"""SSD's ground truth and prior matching (src/caffe/util/bbox_util.cpp of the fork:
GetGroundTruth, GetPriorBBoxes, MatchBBox).

Boxes are float32 rows of (xmin, ymin, xmax, ymax) in normalized coordinates; overlaps are
SSD's JaccardOverlap (``boxes.jaccard_overlaps``). A match index is a ground-truth row of the
image (0, 1, ...), -1 for no match, or -2 for a prediction ignored because it crosses the
image boundary (``ignore_cross_boundary_bbox``).
"""
import numpy as np
from numba import njit

from pycaffe_cli.detection.boxes import jaccard_overlaps
from pycaffe_cli.detection.nms import nms_indices

BIPARTITE = 0
PER_PREDICTION = 1
MAX_NEGATIVE = 1  # MultiBoxLossParameter.MiningType
HARD_EXAMPLE = 2

NO_MATCH = -1
IGNORED = -2

# The fork keeps an overlap as a candidate only when it is above this (MatchBBox).
_MIN_OVERLAP = 1e-6


class GroundTruth:
    """One image's ground-truth boxes: ``boxes`` (G, 4) float32, ``labels`` (G,) int64 and
    ``difficult`` (G,) bool, in the order of the label blob's rows."""

    def __init__(self, boxes, labels, difficult):
        self.boxes = boxes
        self.labels = labels
        self.difficult = difficult

    def __len__(self):
        return len(self.labels)


def read_ground_truth(label_data, num, background_label_id, use_difficult_gt):
    """The ground truth of each image of a batch from SSD's label blob (GetGroundTruth).

    Rows are (item_id, label, instance_id, xmin, ymin, xmax, ymax, difficult). Rows with
    item_id -1 are padding and skipped; difficult rows are skipped unless
    ``use_difficult_gt``. Ids and labels are truncated to integers as the fork's int casts do.

    Args:
        label_data: the label blob's values, any shape holding rows of 8.
        num: the batch size; rows for items outside [0, num) are never looked at.
        background_label_id: a kept row may not carry it.
        use_difficult_gt: keep the rows marked difficult.

    Returns:
        A list of ``num`` entries: a GroundTruth, or None for an image without any kept row
        (the fork's map has no entry for it, which its loss treats differently from an image
        whose boxes match nothing).

    Raises:
        ValueError: for a kept row whose label is the background label.
    """
    rows = np.asarray(label_data, np.float32).reshape(-1, 8)
    item_ids = np.trunc(rows[:, 0]).astype(np.int64)
    labels = np.trunc(rows[:, 1]).astype(np.int64)
    present = item_ids != -1
    if np.any(present & (labels == background_label_id)):
        raise ValueError(f"found the background label {background_label_id} in the ground "
                         "truth (a box of the label blob may not carry background_label_id)")
    difficult = rows[:, 7] != 0
    kept = present if use_difficult_gt else present & ~difficult
    result = []
    for item in range(num):
        rows_of_item = np.flatnonzero(kept & (item_ids == item))
        if len(rows_of_item) == 0:
            result.append(None)
            continue
        result.append(GroundTruth(np.ascontiguousarray(rows[rows_of_item, 3:7]),
                                  labels[rows_of_item], difficult[rows_of_item]))
    return result


def read_priors(prior_data, num_priors):
    """(prior boxes (P, 4), variances (P, 4)) from a PriorBox top (GetPriorBBoxes): the boxes
    first, then one variance row per prior."""
    values = np.asarray(prior_data, np.float32).reshape(-1)
    boxes = values[:4 * num_priors].reshape(num_priors, 4)
    variances = values[4 * num_priors:8 * num_priors].reshape(num_priors, 4)
    return boxes, variances


def crosses_boundary(boxes):
    """Whether each box has a coordinate outside [0, 1] (IsCrossBoundaryBBox)."""
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    return np.any((boxes < 0) | (boxes > 1), axis=1)


def match_boxes(gt_boxes, pred_boxes, match_type, overlap_threshold,
                ignore_cross_boundary_bbox=False):
    """Match predictions (or priors) to ground truth as the fork's MatchBBox does.

    First a greedy bipartite matching: while unmatched ground truth is left, the pair
    (prediction, ground truth) with the largest overlap among unmatched predictions and
    unmatched ground truth is matched (ties: the lowest prediction, then the lowest ground
    truth index). PER_PREDICTION then gives every prediction still unmatched the ground truth
    it overlaps most, if that overlap is at least ``overlap_threshold``. Only overlaps above
    1e-6 count. Predictions crossing the image boundary get index -2 and overlap 0 when
    ``ignore_cross_boundary_bbox``.

    Args:
        gt_boxes: (G, 4) ground-truth boxes.
        pred_boxes: (P, 4) priors or decoded predictions.
        match_type: BIPARTITE (0) or PER_PREDICTION (1) (MultiBoxLossParameter.MatchType).
        overlap_threshold: PER_PREDICTION's minimum overlap.
        ignore_cross_boundary_bbox: skip predictions with a coordinate outside [0, 1].

    Returns:
        (indices (P,) int32, overlaps (P,) float32): each prediction's ground-truth row (-1:
        none, -2: ignored) and its overlap: for a matched prediction the overlap with its
        match, otherwise its largest overlap with any ground truth (0 if none).
    """
    if match_type not in (BIPARTITE, PER_PREDICTION):
        raise ValueError(f"unknown match_type {match_type}")
    pred_boxes = np.asarray(pred_boxes, np.float32).reshape(-1, 4)
    gt_boxes = np.asarray(gt_boxes, np.float32).reshape(-1, 4)
    num_pred = len(pred_boxes)
    indices = np.full(num_pred, NO_MATCH, np.int32)
    overlaps = np.zeros(num_pred, np.float32)
    if len(gt_boxes) == 0:
        return indices, overlaps
    ious = jaccard_overlaps(pred_boxes, gt_boxes)
    if ignore_cross_boundary_bbox:
        ignored = crosses_boundary(pred_boxes)
        indices[ignored] = IGNORED
        ious[ignored] = 0
    candidate = ious.astype(np.float64) > _MIN_OVERLAP
    ious = np.where(candidate, ious, np.float32(-1))
    overlaps[:] = np.maximum(ious.max(axis=1), 0)
    _bipartite(ious, indices, overlaps)
    if match_type == PER_PREDICTION:
        free = np.flatnonzero(indices == NO_MATCH)
        eligible = np.where(candidate[free] & (ious[free] >= np.float32(overlap_threshold)),
                            ious[free], np.float32(-1))
        best = np.argmax(eligible, axis=1)
        best_overlap = eligible[np.arange(len(free)), best]
        found = best_overlap > 0
        indices[free[found]] = best[found]
        overlaps[free[found]] = best_overlap[found]
    return indices, overlaps


@njit(cache=True)
def _bipartite(ious, indices, overlaps):
    """Greedy bipartite matching in place: ``ious`` (P, G) holds -1 where a pair is no
    candidate; ``indices`` -1 marks a free prediction. Strictly-greater comparisons visited in
    (prediction, ground truth) order keep the first of equal overlaps, as the fork's loops."""
    num_pred, num_gt = ious.shape
    gt_free = np.ones(num_gt, np.bool_)
    for _ in range(num_gt):
        best_pred = -1
        best_gt = -1
        best = np.float32(-1)
        for i in range(num_pred):
            if indices[i] != -1:
                continue
            for j in range(num_gt):
                if gt_free[j] and ious[i, j] > best:
                    best_pred = i
                    best_gt = j
                    best = ious[i, j]
        if best_pred == -1:
            return
        indices[best_pred] = best_gt
        overlaps[best_pred] = best
        gt_free[best_gt] = False


def suppress_by_loss(boxes, losses, nms_threshold, top_k):
    """The fork's ApplyNMS (not ApplyNMSFast), as hard example mining uses it: positions of
    the boxes kept, in descending loss order. The boxes are sorted by loss (stable), cut to
    the first ``top_k`` when ``top_k`` > -1, boxes of area below 1e-5 dropped, then a box is
    kept when it overlaps no kept box by more than ``nms_threshold``."""
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    losses = np.asarray(losses, np.float32).reshape(-1)
    order = np.argsort(-losses, kind="stable")
    if -1 < top_k < len(order):
        order = order[:top_k]
    order = order[box_areas(boxes[order]) >= np.float32(1e-5)]
    # Ranks as scores keep the order above; nms_indices then only suppresses.
    ranks = -np.arange(len(order), dtype=np.float32)
    kept = nms_indices(boxes[order], ranks, -np.inf, nms_threshold)
    return order[kept]


def box_areas(boxes):
    """Normalized areas, 0 for an inverted box (BBoxSize)."""
    width = boxes[:, 2] - boxes[:, 0]
    height = boxes[:, 3] - boxes[:, 1]
    return np.where((width < 0) | (height < 0), np.float32(0), width * height)


def mine_image(match, overlaps, losses, mining_type, neg_pos_ratio, neg_overlap,
               sample_size, nms=None):
    """One image's share of the fork's MineHardExamples (one location class).

    Eligible are, for MAX_NEGATIVE (1), the unmatched priors whose overlap is below
    ``neg_overlap``, and for HARD_EXAMPLE (2), all priors. Of them the ones with the largest
    ``losses`` are selected: at most int(positives * neg_pos_ratio) for MAX_NEGATIVE, at most
    ``sample_size`` for HARD_EXAMPLE, and with ``nms`` = (boxes, nms_threshold, top_k) only
    among those that survive ``suppress_by_loss``. Equal losses keep the lower index first
    (the fork's std::sort leaves their order unspecified).

    Returns:
        (match, negatives): the match indices with HARD_EXAMPLE's unselected positives set to
        -1, and the selected unmatched priors in ascending order.
    """
    eligible = np.ones(len(match), bool) if mining_type == HARD_EXAMPLE else (
        (match == NO_MATCH) & (overlaps < np.float32(neg_overlap)))
    candidates = np.flatnonzero(eligible)
    if mining_type == HARD_EXAMPLE:
        num_sel = min(sample_size, len(candidates))
    else:
        num_pos = int(np.count_nonzero(match > NO_MATCH))
        num_sel = min(int(np.float32(num_pos) * np.float32(neg_pos_ratio)), len(candidates))
    if nms is not None:
        boxes, nms_threshold, top_k = nms
        kept = suppress_by_loss(boxes[candidates], losses[candidates], nms_threshold, top_k)
        chosen = candidates[kept[:num_sel]]
    else:
        order = np.argsort(-losses[candidates], kind="stable")
        chosen = candidates[order[:num_sel]]
    selected = np.zeros(len(match), bool)
    selected[chosen] = True
    negatives = np.flatnonzero((match == NO_MATCH) & selected)
    if mining_type == HARD_EXAMPLE:
        match = np.where((match > NO_MATCH) & ~selected, NO_MATCH, match).astype(np.int32)
    return match, negatives

