"""py-faster-rcnn's AnchorTargetLayer (``rpn.anchor_target_layer.AnchorTargetLayer``), on numpy.

Labels every anchor of the RPN for training and gives its regression targets::

    layer { name: 'rpn-data' type: 'Python'
      bottom: 'rpn_cls_score'   # (1, 2A, H, W): only its H and W are read
      bottom: 'gt_boxes'        # (G, 5): x1, y1, x2, y2, class
      bottom: 'im_info'         # (1, 3): height, width, scale
      bottom: 'data'            # (unused; the published train nets pass it)
      top: 'rpn_labels'                 # (1, 1, A * H, W): 1 object, 0 background, -1 ignored
      top: 'rpn_bbox_targets'           # (1, 4A, H, W)
      top: 'rpn_bbox_inside_weights'    # (1, 4A, H, W)
      top: 'rpn_bbox_outside_weights'   # (1, 4A, H, W)
      python_param { module: 'rpn.anchor_target_layer' layer: 'AnchorTargetLayer'
                     param_str: "'feat_stride': 16" } }

As the fork: only anchors inside the image (``allowed_border`` pixels of slack, default 0)
are labelled. An anchor is background below 0.3 IoU with every ground-truth box, object at
0.7 or more, and object when it is (one of) the best anchor(s) of some ground-truth box.
At most 128 objects and 256 labels in all are kept, the rest drawn at random (numpy's global
generator, which ``np.random.seed`` seeds) become -1. Targets are the deltas to each
anchor's best box; inside weights 1 for object anchors; outside weights 1 / (labelled
anchors). The settings are py-faster-rcnn's cfg.TRAIN.RPN_* defaults; ``param_str`` may
set them by lower-case name (``'positive_overlap': 0.7`` ...).

Kept from the fork: a ground-truth box that no inside anchor touches has best overlap 0, so
every anchor that does not touch it becomes an object anchor (the fork's "ties with the
best" rule read literally).
"""
import numpy as np

from .boxes import overlaps, regression_targets
from .generate_anchors import anchors_from_params
from .params import LayerBase, read_params
from .proposal_layer import shifted_anchors

# py-faster-rcnn's cfg.TRAIN.RPN_* defaults.
SETTINGS = {"positive_overlap": 0.7, "negative_overlap": 0.3, "clobber_positives": False,
            "fg_fraction": 0.5, "batchsize": 256, "positive_weight": -1.0,
            "allowed_border": 0}
KEYS = ("feat_stride", "scales", "ratios", "base_size") + tuple(SETTINGS)


def label_anchors(anchors, gt_boxes, settings, rng=np.random):
    """Labels (1, 0, -1) and the index of each anchor's best ground-truth box."""
    labels = np.full(len(anchors), -1, dtype=np.float32)
    iou = overlaps(anchors, gt_boxes)
    best_gt = iou.argmax(axis=1)
    best = iou[np.arange(len(anchors)), best_gt]
    best_anchor_iou = iou.max(axis=0)
    tied_best = np.flatnonzero((iou == best_anchor_iou).any(axis=1))
    negative = best < settings["negative_overlap"]
    if not settings["clobber_positives"]:
        labels[negative] = 0
    labels[tied_best] = 1
    labels[best >= settings["positive_overlap"]] = 1
    if settings["clobber_positives"]:
        labels[negative] = 0
    max_fg = int(settings["fg_fraction"] * settings["batchsize"])
    _subsample(labels, 1, max_fg, rng)
    _subsample(labels, 0, settings["batchsize"] - int(np.sum(labels == 1)), rng)
    return labels, best_gt


def _subsample(labels, value, limit, rng):
    """Set all but ``limit`` random ones of the labels equal to ``value`` to -1."""
    found = np.flatnonzero(labels == value)
    if len(found) > limit:
        labels[rng.choice(found, size=len(found) - limit, replace=False)] = -1


def _spread(values, count, where, fill):
    """A (count, ...) float32 array holding ``values`` at rows ``where``, ``fill`` elsewhere."""
    out = np.full((count,) + values.shape[1:], fill, dtype=np.float32)
    out[where] = values
    return out


class AnchorTargetLayer(LayerBase):
    """RPN training targets for every anchor (see the module docstring)."""

    def setup(self, bottom, top):
        params = read_params(self, KEYS, required="feat_stride")
        self._feat_stride = params["feat_stride"]
        self._anchors = anchors_from_params(params)
        self.settings = {key: params.get(key, value) for key, value in SETTINGS.items()}
        if len(bottom) < 3 or len(top) != 4:
            raise ValueError("AnchorTargetLayer takes 3 or 4 bottoms (scores, gt_boxes, "
                             "im_info[, data]) and gives 4 tops")
        self.reshape(bottom, top)

    def reshape(self, bottom, top):
        count = self._anchors.shape[0]
        height, width = bottom[0].data.shape[-2:]
        top[0].reshape(1, 1, count * height, width)
        for blob in top[1:]:
            blob.reshape(1, 4 * count, height, width)

    def forward(self, bottom, top):
        if bottom[0].data.shape[0] != 1:
            raise ValueError(f"AnchorTargetLayer handles one image at a time; the batch is "
                             f"{bottom[0].data.shape[0]}")
        count = self._anchors.shape[0]
        height, width = bottom[0].data.shape[-2:]
        gt_boxes = bottom[1].data.reshape(-1, 5)
        im_height, im_width = bottom[2].data[0, :2]
        border = self.settings["allowed_border"]
        anchors = shifted_anchors(self._anchors, height, width, self._feat_stride)
        inside = np.flatnonzero((anchors[:, 0] >= -border) & (anchors[:, 1] >= -border)
                                & (anchors[:, 2] < im_width + border)
                                & (anchors[:, 3] < im_height + border))
        labels, best_gt = label_anchors(anchors[inside], gt_boxes, self.settings)
        targets = regression_targets(anchors[inside], gt_boxes[best_gt, :4])
        inside_weights = np.zeros((len(inside), 4), dtype=np.float32)
        inside_weights[labels == 1] = 1
        outside_weights = np.zeros((len(inside), 4), dtype=np.float32)
        positive_weight = self.settings["positive_weight"]
        if positive_weight < 0:
            outside_weights[labels >= 0] = 1.0 / np.sum(labels >= 0)
        else:
            outside_weights[labels == 1] = positive_weight / np.sum(labels == 1)
            outside_weights[labels == 0] = (1.0 - positive_weight) / np.sum(labels == 0)
        total = len(anchors)
        # rows are ordered (row, column, anchor): to (1, A, H, W) and (1, 4A, H, W)
        labels = _spread(labels, total, inside, -1).reshape(height, width, count)
        top[0].data[...] = labels.transpose(2, 0, 1).reshape(1, 1, count * height, width)
        for blob, values in zip(top[1:], (targets, inside_weights, outside_weights)):
            values = _spread(values, total, inside, 0).reshape(height, width, 4 * count)
            blob.data[...] = values.transpose(2, 0, 1)[None]

    def backward(self, top, propagate_down, bottom):
        """No gradient flows back to the scores or the boxes (as in the fork)."""
