"""py-faster-rcnn's ProposalLayer (``rpn.proposal_layer.ProposalLayer``), on numpy alone.

Turns a region proposal network's outputs into regions of interest::

    layer { name: 'proposal' type: 'Python'
      bottom: 'rpn_cls_prob_reshape'   # (1, 2A, H, W): A background then A object scores
      bottom: 'rpn_bbox_pred'          # (1, 4A, H, W): dx, dy, dw, dh per anchor
      bottom: 'im_info'                # (1, 3): image height, width, scale
      top: 'rois'                      # (R, 5): 0, x1, y1, x2, y2 in image pixels
      top: 'scores'                    # optional (R, 1): their object scores
      python_param { module: 'rpn.proposal_layer' layer: 'ProposalLayer'
                     param_str: "'feat_stride': 16" } }

Forward, as the fork: anchors (rpn/generate_anchors.py) shifted by ``feat_stride`` to every
cell of the H x W map, ordered by (row, column, anchor); moved by the deltas; clipped to the
image; boxes with a side under ``min_size * scale`` dropped; the best ``pre_nms_topN`` by
object score kept; non-maximum suppression at ``nms_thresh``; the first ``post_nms_topN``
kept. The number of rows R changes from image to image: the tops are reshaped in forward.

The settings are py-faster-rcnn's defaults (fast_rcnn/config.py) for the layer's phase:
TEST 6000 / 300 / 0.7 / 16 and TRAIN 12000 / 2000 / 0.7 / 16 (pre_nms_topN, post_nms_topN,
nms_thresh, min_size). Beyond the fork, ``param_str`` may override them by those names and
set the anchors' ``scales`` and ``ratios`` (later py-faster-rcnn reads ``scales`` there):
``param_str: "'feat_stride': 16, 'scales': (4, 8, 16), 'post_nms_topN': 100"``.

``param_str`` is YAML in the fork; here it is read without pyyaml (rpn/params.py) as a Python
dict literal with the braces left out and bare keys quoted, which covers the published nets
and YAML's ``key: value`` pairs; pyyaml, where installed, reads anything else. Unknown keys
are refused (the fork ignores them). Only batches of one image are supported, as in the fork.
"""
import numpy as np

from .boxes import apply_deltas, clip_to_image, large_enough, nms
from .generate_anchors import anchors_from_params
from .params import LayerBase, phase_name, read_params

# py-faster-rcnn's cfg.TRAIN / cfg.TEST RPN_PRE_NMS_TOP_N, RPN_POST_NMS_TOP_N,
# RPN_NMS_THRESH and RPN_MIN_SIZE.
SETTINGS = {
    "TRAIN": {"pre_nms_topN": 12000, "post_nms_topN": 2000, "nms_thresh": 0.7, "min_size": 16},
    "TEST": {"pre_nms_topN": 6000, "post_nms_topN": 300, "nms_thresh": 0.7, "min_size": 16},
}
KEYS = ("feat_stride", "scales", "ratios", "base_size") + tuple(SETTINGS["TEST"])


def shifted_anchors(anchors, height, width, stride):
    """Every anchor at every cell of a height x width map, rows ordered (row, column, anchor)
    slowest to fastest, as an (H * W * A, 4) array."""
    shift_x, shift_y = np.meshgrid(np.arange(width) * stride, np.arange(height) * stride)
    shifts = np.stack([shift_x.ravel(), shift_y.ravel()] * 2, axis=1)
    return (shifts[:, None, :] + anchors[None, :, :]).reshape(-1, 4)


def propose(scores, deltas, im_info, anchors, feat_stride, pre_nms_topN, post_nms_topN,
            nms_thresh, min_size):
    """The proposal layer's forward for one image: ``(boxes (R, 4), scores (R,))``.

    Args:
        scores: (A, H, W) object scores.
        deltas: (4A, H, W) regression deltas.
        im_info: (height, width, scale) of the network's input image.
        anchors: (A, 4) anchors at cell (0, 0).
    """
    count = anchors.shape[0]
    height, width = scores.shape[-2:]
    boxes = apply_deltas(shifted_anchors(anchors, height, width, feat_stride),
                         deltas.reshape(count * 4, height, width).transpose(1, 2, 0)
                         .reshape(-1, 4))
    scores = scores.reshape(count, height, width).transpose(1, 2, 0).ravel()
    clip_to_image(boxes, im_info[0], im_info[1])
    keep = large_enough(boxes, min_size * im_info[2])
    boxes, scores = boxes[keep], scores[keep]
    order = np.argsort(-scores, kind="stable")
    if pre_nms_topN > 0:
        order = order[:pre_nms_topN]
    boxes, scores = boxes[order], scores[order]
    keep = nms(boxes, scores, nms_thresh, max_keep=max(post_nms_topN, 0))
    return boxes[keep], scores[keep]


class ProposalLayer(LayerBase):
    """Region proposals from RPN scores and deltas (see the module docstring)."""

    def setup(self, bottom, top):
        params = read_params(self, KEYS, required="feat_stride")
        self._feat_stride = params["feat_stride"]
        self._anchors = anchors_from_params(params)
        self._num_anchors = self._anchors.shape[0]
        settings = dict(SETTINGS[phase_name(getattr(self, "phase", 1))])
        settings.update((key, params[key]) for key in settings if key in params)
        self.settings = settings
        if len(bottom) != 3 or len(top) not in (1, 2):
            raise ValueError("ProposalLayer takes 3 bottoms (scores, deltas, im_info) and "
                             f"gives 1 or 2 tops (rois, scores), not {len(bottom)} and "
                             f"{len(top)}")
        top[0].reshape(1, 5)
        if len(top) > 1:
            top[1].reshape(1, 1, 1, 1)

    def reshape(self, bottom, top):
        """The tops' first axis is known only after forward, which reshapes them."""

    def forward(self, bottom, top):
        scores, deltas = bottom[0].data, bottom[1].data
        if scores.shape[0] != 1:
            raise ValueError(f"ProposalLayer handles one image at a time; the batch is "
                             f"{scores.shape[0]}")
        count = self._num_anchors
        if scores.shape[1] != 2 * count or deltas.shape[1] != 4 * count:
            raise ValueError(f"ProposalLayer: with {count} anchors the scores need "
                             f"{2 * count} channels and the deltas {4 * count}; got "
                             f"{scores.shape[1]} and {deltas.shape[1]}")
        boxes, kept_scores = propose(scores[0, count:], deltas[0], bottom[2].data[0],
                                     self._anchors, self._feat_stride, **self.settings)
        rois = np.zeros((boxes.shape[0], 5), dtype=np.float32)
        rois[:, 1:] = boxes
        top[0].reshape(*rois.shape)
        top[0].data[...] = rois
        if len(top) > 1:
            top[1].reshape(kept_scores.shape[0], 1)
            top[1].data[...] = kept_scores[:, None]

    def backward(self, top, propagate_down, bottom):
        """No gradient flows back through the proposals (as in the fork)."""
