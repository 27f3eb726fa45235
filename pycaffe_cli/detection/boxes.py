"""Box geometry as SSD's Caffe fork computes it (src/caffe/util/bbox_util.cpp), in float32.

Boxes are rows of (xmin, ymin, xmax, ymax). *Normalized* boxes have coordinates in [0, 1] and
an area of width * height; pixel boxes (``normalized=False``) count both end pixels, so their
width is xmax - xmin + 1. A box whose max is below its min has size 0.
"""
import numpy as np


def box_sizes(boxes, normalized=True):
    """Area of each box (SSD's BBoxSize); 0 for an inverted box."""
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    extra = np.float32(0 if normalized else 1)
    width = boxes[:, 2] - boxes[:, 0]
    height = boxes[:, 3] - boxes[:, 1]
    inverted = (width < 0) | (height < 0)
    return np.where(inverted, np.float32(0), (width + extra) * (height + extra))


def jaccard_overlaps(boxes_a, boxes_b, normalized=True):
    """Intersection over union of every box of ``boxes_a`` with every box of ``boxes_b``
    (SSD's JaccardOverlap), as a (len(a), len(b)) float32 array.

    As in the fork, ``normalized`` only decides the intersection's extent (+1 pixel when
    False); the union always takes the boxes' normalized areas, and boxes that do not meet
    intersect in the empty box (0, 0, 0, 0), which has extent 1 x 1 when not normalized.
    """
    a = np.asarray(boxes_a, np.float32).reshape(-1, 1, 4)
    b = np.asarray(boxes_b, np.float32).reshape(1, -1, 4)
    extra = np.float32(0 if normalized else 1)
    apart = ((b[..., 0] > a[..., 2]) | (b[..., 2] < a[..., 0])
             | (b[..., 1] > a[..., 3]) | (b[..., 3] < a[..., 1]))
    zero = np.float32(0)
    width = np.where(apart, zero,
                     np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0])) + extra
    height = np.where(apart, zero,
                      np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1])) + extra
    meet = (width > 0) & (height > 0)
    intersection = width * height
    union = box_sizes(boxes_a)[:, None] + box_sizes(boxes_b)[None, :] - intersection
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(meet, intersection / union, zero).astype(np.float32)
