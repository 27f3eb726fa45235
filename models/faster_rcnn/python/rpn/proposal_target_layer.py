"""py-faster-rcnn's ProposalTargetLayer (``rpn.proposal_target_layer.ProposalTargetLayer``).

Samples the RoIs the detection head trains on and gives their class labels and box targets::

    layer { name: 'roi-data' type: 'Python'
      bottom: 'rpn_rois'   # (R, 5): 0, x1, y1, x2, y2 (the proposal layer's rois)
      bottom: 'gt_boxes'   # (G, 5): x1, y1, x2, y2, class
      top: 'rois'                  # (K, 5)
      top: 'labels'                # (K,)
      top: 'bbox_targets'          # (K, 4 * num_classes)
      top: 'bbox_inside_weights'   # (K, 4 * num_classes)
      top: 'bbox_outside_weights'  # (K, 4 * num_classes)
      python_param { module: 'rpn.proposal_target_layer' layer: 'ProposalTargetLayer'
                     param_str: "'num_classes': 21" } }

As the fork: the ground-truth boxes join the proposals; of 128 RoIs per image at most a
quarter (round(0.25 * 128) = 32) are objects (IoU >= 0.5 with a ground-truth box, labelled
with its class), the rest background (IoU in [0.1, 0.5), label 0), each drawn at random
without replacement (numpy's global generator); fewer come out when fewer qualify. Targets
are the deltas to the best box, normalized by the means (0, 0, 0, 0) and deviations
(0.1, 0.1, 0.2, 0.2) of py-faster-rcnn's end-to-end training
(BBOX_NORMALIZE_TARGETS_PRECOMPUTED), written into the 4 columns of the RoI's class; the
weights are 1 there. ``param_str`` may set ``batch_size``, ``fg_fraction``, ``fg_thresh``,
``bg_thresh_hi``, ``bg_thresh_lo``, ``bbox_normalize`` (False: raw deltas), ``bbox_means``
and ``bbox_stds``.
"""
import numpy as np

from .boxes import overlaps, regression_targets
from .params import LayerBase, read_params

# py-faster-rcnn's cfg.TRAIN defaults, with experiments/cfgs/faster_rcnn_end2end.yml's
# precomputed target normalization.
SETTINGS = {"batch_size": 128, "fg_fraction": 0.25, "fg_thresh": 0.5, "bg_thresh_hi": 0.5,
            "bg_thresh_lo": 0.1, "bbox_normalize": True, "bbox_means": (0.0, 0.0, 0.0, 0.0),
            "bbox_stds": (0.1, 0.1, 0.2, 0.2)}
KEYS = ("num_classes",) + tuple(SETTINGS)


def sample_rois(rois, gt_boxes, settings, rng=np.random):
    """(keep, labels, best_gt): indices of the sampled ``rois`` (objects first), their labels
    and the index of each one's best ground-truth box."""
    iou = overlaps(rois[:, 1:5], gt_boxes[:, :4])
    best_gt = iou.argmax(axis=1)
    best = iou.max(axis=1)
    per_image = settings["batch_size"]
    fg = np.flatnonzero(best >= settings["fg_thresh"])
    fg_count = int(min(np.round(settings["fg_fraction"] * per_image), fg.size))
    if fg.size:
        fg = rng.choice(fg, size=fg_count, replace=False)
    bg = np.flatnonzero((best < settings["bg_thresh_hi"]) & (best >= settings["bg_thresh_lo"]))
    bg_count = int(min(per_image - fg_count, bg.size))
    if bg.size:
        bg = rng.choice(bg, size=bg_count, replace=False)
    keep = np.append(fg, bg).astype(np.int64)
    labels = gt_boxes[best_gt[keep], 4].astype(np.float32)
    labels[fg_count:] = 0
    return keep, labels, best_gt[keep]


def class_targets(deltas, labels, num_classes):
    """(targets, weights) of shape (K, 4 * num_classes): each object RoI's deltas and weights
    of 1 in its class's 4 columns; background rows stay 0."""
    targets = np.zeros((len(labels), 4 * num_classes), dtype=np.float32)
    weights = np.zeros_like(targets)
    for row in np.flatnonzero(labels > 0):
        start = 4 * int(labels[row])
        targets[row, start:start + 4] = deltas[row]
        weights[row, start:start + 4] = 1
    return targets, weights


class ProposalTargetLayer(LayerBase):
    """Detection-head training samples (see the module docstring)."""

    def setup(self, bottom, top):
        params = read_params(self, KEYS, required="num_classes")
        self._num_classes = int(params["num_classes"])
        self.settings = {key: params.get(key, value) for key, value in SETTINGS.items()}
        if len(bottom) != 2 or len(top) != 5:
            raise ValueError("ProposalTargetLayer takes 2 bottoms (rois, gt_boxes) and gives 5 "
                             "tops")
        top[0].reshape(1, 5)
        top[1].reshape(1, 1)
        for blob in top[2:]:
            blob.reshape(1, 4 * self._num_classes)

    def reshape(self, bottom, top):
        """The number of sampled RoIs is known only in forward, which reshapes the tops."""

    def forward(self, bottom, top):
        gt_boxes = bottom[1].data.reshape(-1, 5)
        rois = np.vstack([bottom[0].data.reshape(-1, 5),
                          np.hstack([np.zeros((len(gt_boxes), 1), np.float32),
                                     gt_boxes[:, :4]])])
        if np.any(rois[:, 0] != 0):
            raise ValueError("ProposalTargetLayer handles one image at a time: every RoI's "
                             "batch index must be 0")
        keep, labels, best_gt = sample_rois(rois, gt_boxes, self.settings)
        rois = rois[keep]
        deltas = regression_targets(rois[:, 1:5], gt_boxes[best_gt, :4])
        if self.settings["bbox_normalize"]:
            deltas = ((deltas - np.asarray(self.settings["bbox_means"]))
                      / np.asarray(self.settings["bbox_stds"]))
        targets, weights = class_targets(deltas, labels, self._num_classes)
        for blob, values in zip(top, (rois, labels, targets, weights,
                                      (weights > 0).astype(np.float32))):
            blob.reshape(*values.shape)
            blob.data[...] = values

    def backward(self, top, propagate_down, bottom):
        """No gradient flows back to the proposals (as in the fork)."""
