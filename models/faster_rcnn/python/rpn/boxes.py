"""Box arithmetic of py-faster-rcnn's proposal layer, in numpy: applying regression deltas,
clipping to the image, dropping small boxes, and greedy non-maximum suppression.

Boxes are ``(x1, y1, x2, y2)`` with inclusive corners (width ``x2 - x1 + 1``).
"""
import numpy as np


def apply_deltas(boxes, deltas):
    """Move ``boxes`` (N, 4) by regression ``deltas`` (N, 4k: dx, dy, dw, dh per class).

    With w = x2 - x1 + 1 and centre cx = x1 + w / 2 (py-faster-rcnn's centre, half a pixel
    right of the box's middle): cx' = cx + dx * w, w' = w * exp(dw), and the new box is
    (cx' - w'/2, cy' - h'/2, cx' + w'/2, cy' + h'/2), the same for y. The result is in the
    deltas' dtype (float32 from a blob). Like the fork, dw and dh are not clamped: a huge one
    gives an infinite side (without numpy's overflow warning), which clipping then bounds.
    """
    deltas = np.asarray(deltas)
    if len(boxes) == 0:
        return np.zeros((0, deltas.shape[1]), dtype=deltas.dtype)
    boxes = np.asarray(boxes).astype(deltas.dtype, copy=False)
    widths = (boxes[:, 2] - boxes[:, 0] + 1)[:, None]
    heights = (boxes[:, 3] - boxes[:, 1] + 1)[:, None]
    centre_x = boxes[:, 0:1] + 0.5 * widths
    centre_y = boxes[:, 1:2] + 0.5 * heights
    new_x = deltas[:, 0::4] * widths + centre_x
    new_y = deltas[:, 1::4] * heights + centre_y
    with np.errstate(over="ignore"):
        half_w = 0.5 * np.exp(deltas[:, 2::4]) * widths
        half_h = 0.5 * np.exp(deltas[:, 3::4]) * heights
    moved = np.empty_like(deltas)
    moved[:, 0::4] = new_x - half_w
    moved[:, 1::4] = new_y - half_h
    moved[:, 2::4] = new_x + half_w
    moved[:, 3::4] = new_y + half_h
    return moved


def clip_to_image(boxes, height, width):
    """Clip x into [0, width - 1] and y into [0, height - 1], in place; returns ``boxes``.

    The upper bound is applied first, so an empty image (im_info of zeros, as when a net is
    timed with zero inputs) gives zeros, as in the fork.
    """
    boxes[:, 0::2] = np.maximum(np.minimum(boxes[:, 0::2], width - 1), 0)
    boxes[:, 1::2] = np.maximum(np.minimum(boxes[:, 1::2], height - 1), 0)
    return boxes


def large_enough(boxes, min_size):
    """Indices of the boxes whose width and height (inclusive) are both at least min_size."""
    widths = boxes[:, 2] - boxes[:, 0] + 1
    heights = boxes[:, 3] - boxes[:, 1] + 1
    return np.flatnonzero((widths >= min_size) & (heights >= min_size))


def nms(boxes, scores, threshold, max_keep=0):
    """Greedy non-maximum suppression: indices of the kept boxes, best score first.

    Walking the boxes from the highest score down, a box is kept unless its overlap
    (intersection over union, areas counted in inclusive pixels) with a box kept before it is
    above ``threshold``. ``max_keep`` > 0 stops after that many (the same first ``max_keep``
    as a full run). Equal scores keep their input order (a stable sort; the fork's
    ``argsort()[::-1]`` leaves their order to numpy).
    """
    boxes = np.asarray(boxes)
    order = np.argsort(-np.asarray(scores).ravel(), kind="stable")
    x1, y1, x2, y2 = (boxes[:, i] for i in range(4))
    areas = (x2 - x1 + 1) * (y2 - y1 + 1)
    keep = []
    while order.size:
        best, rest = order[0], order[1:]
        keep.append(best)
        if max_keep > 0 and len(keep) == max_keep:
            break
        left = np.maximum(x1[best], x1[rest])
        right = np.minimum(x2[best], x2[rest])
        top = np.maximum(y1[best], y1[rest])
        bottom = np.minimum(y2[best], y2[rest])
        inter = np.maximum(0, right - left + 1) * np.maximum(0, bottom - top + 1)
        overlap = inter / (areas[best] + areas[rest] - inter)
        order = rest[overlap <= threshold]
    return np.array(keep, dtype=np.int64)


def overlaps(boxes, others):
    """(N, K) intersection over union of every box with every other box, areas in inclusive
    pixels; 0 where they do not meet (py-faster-rcnn's ``bbox_overlaps``)."""
    boxes = np.asarray(boxes, dtype=np.float64)[:, None, :4]
    others = np.asarray(others, dtype=np.float64)[None, :, :4]
    inter_w = np.minimum(boxes[..., 2], others[..., 2]) - np.maximum(boxes[..., 0],
                                                                     others[..., 0]) + 1
    inter_h = np.minimum(boxes[..., 3], others[..., 3]) - np.maximum(boxes[..., 1],
                                                                     others[..., 1]) + 1
    inter = np.where((inter_w > 0) & (inter_h > 0), inter_w * inter_h, 0.0)
    area = ((boxes[..., 2] - boxes[..., 0] + 1) * (boxes[..., 3] - boxes[..., 1] + 1)
            + (others[..., 2] - others[..., 0] + 1) * (others[..., 3] - others[..., 1] + 1))
    return inter / (area - inter)


def regression_targets(boxes, targets):
    """The deltas (dx, dy, dw, dh) that ``apply_deltas`` turns ``boxes`` into ``targets``
    (both (N, 4)): dx = (tcx - cx) / w, dw = log(tw / w), with py-faster-rcnn's centres."""
    boxes = np.asarray(boxes, dtype=np.float64)
    targets = np.asarray(targets, dtype=np.float64)
    widths = boxes[:, 2] - boxes[:, 0] + 1
    heights = boxes[:, 3] - boxes[:, 1] + 1
    target_w = targets[:, 2] - targets[:, 0] + 1
    target_h = targets[:, 3] - targets[:, 1] + 1
    return np.stack([
        (targets[:, 0] + 0.5 * target_w - boxes[:, 0] - 0.5 * widths) / widths,
        (targets[:, 1] + 0.5 * target_h - boxes[:, 1] - 0.5 * heights) / heights,
        np.log(target_w / widths), np.log(target_h / heights)], axis=1)
