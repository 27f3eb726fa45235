"""MultiBoxLoss: SSD's training loss (the fork's MultiBoxLossLayer, multibox_loss_layer.cpp).

Bottoms: loc (N, P * L * 4) box offsets, conf (N, P * C) class scores, prior (1, 2, 4 P) from
PriorBox, label (1, 1, G, 8) ground truth (item_id, label, instance_id, xmin, ymin, xmax,
ymax, difficult). L is 1 with ``share_location``, else C = ``num_classes``.

For each image the priors (``use_prior_for_matching``) or the decoded predictions are matched
to its ground truth (detection/matching.py); MAX_NEGATIVE mining then adds the unmatched
priors of highest confidence loss, up to ``neg_pos_ratio`` per match, HARD_EXAMPLE keeps the
``sample_size`` priors of highest confidence + localization loss (both optionally after NMS
by loss). With M matches, n = GetNormalizer(normalization, N, P, M) (VALID: M):

    loss = loc_weight * loc_loss / n + conf_loss / n

loc_loss sums SMOOTH_L1 (|d| < 1: d^2 / 2, else |d| - 1/2) or L2 (d^2 / 2) over the matched
predictions' offsets d = prediction - encoded ground truth; conf_loss sums softmax
cross-entropy (SOFTMAX) or per-class sigmoid cross-entropy (LOGISTIC) over the mined priors,
or over all priors when mining_type is NONE. A term is in the loss only when the layer's
``propagate_down`` for its bottom is not false. The gradients go to the matched / mined
predictions only, scaled by the top's diff / n (and loc_weight for loc).

Where the fork is odd, this layer does the same: with ``encode_variance_in_target`` the
offsets are divided by the variances but the gradient is not; LOGISTIC targets start at the
value background_label_id (so every target is 1 when it is 1); mining with an ``nms_param``
that sets no top_k selects nothing (top_k 0). Equal losses in mining keep the lower prior
first (the fork's std::sort leaves them unordered). Sums are added in float64. The checks the
fork makes during forward on parameters (map_object_to_agnostic needs 2 classes,
HARD_EXAMPLE a positive sample_size) are made at setup. The fork has no CUDA code for this
layer: in GPU mode it runs the same code through the host.
"""
import numpy as np

from pycaffe_cli.detection import matching
from pycaffe_cli.detection.coding import decode_boxes, encode_boxes
from pycaffe_cli.io.foreign import SSD
from pycaffe_cli.layers.base import LossLayer, register
from pycaffe_cli.layers.softmax_with_loss import loss_normalization, normalizer
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2

_P = caffe_pb2.MultiBoxLossParameter
FLT_MIN = np.float32(np.finfo(np.float32).tiny)


@register("MultiBoxLoss", fork=SSD)
class MultiBoxLossLayer(LossLayer):
    """SSD's localization + confidence loss over matched and mined priors."""

    exact_num_bottom = 4

    def layer_setup(self, bottom, top):
        p = self.param.multibox_loss_param
        if not p.HasField("num_classes"):
            raise self.error("multibox_loss_param.num_classes must be set")
        if p.num_classes < 1:
            raise self.error("multibox_loss_param.num_classes must be at least 1")
        self.p = p
        self.num_classes = p.num_classes
        self.loc_classes = 1 if p.share_location else p.num_classes
        self.background = p.background_label_id
        self.mining = p.mining_type
        if p.HasField("do_neg_mining"):
            LOG.warning('layer "%s": do_neg_mining is deprecated, use mining_type instead.',
                        self.name)
            if p.do_neg_mining != (self.mining != _P.NONE):
                raise self.error("do_neg_mining (deprecated) contradicts mining_type: give "
                                 "only mining_type")
        self.normalization = loss_normalization(self.param.loss_param)
        if self.normalization == caffe_pb2.LossParameter.PRE_FIXED:
            raise self.error("MultiBoxLoss does not know loss_param.normalization PRE_FIXED "
                             "(use FULL, VALID, BATCH_SIZE or NONE)")
        if self.mining != _P.NONE and not p.share_location:
            raise self.error("negative mining (mining_type not NONE) needs share_location: "
                             "true")
        if p.conf_loss_type == _P.SOFTMAX and self.background >= self.num_classes:
            raise self.error(f"background_label_id ({self.background}) must be in [0, "
                             f"num_classes) = [0, {self.num_classes}) for SOFTMAX")
        if p.map_object_to_agnostic and self.num_classes != 2:
            raise self.error("map_object_to_agnostic needs num_classes: 2 (background and "
                             "object)")
        if self.mining == _P.HARD_EXAMPLE and p.sample_size <= 0:
            raise self.error("HARD_EXAMPLE mining needs sample_size > 0")
        down = list(self.param.propagate_down)
        self.include = [down[i] if i < len(down) else True for i in range(2)]

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        prior = bottom[2]
        if prior.num_axes != 3 or prior.shape_at(1) != 2 or prior.shape_at(2) % 4:
            raise self.error(f"the prior bottom must be (1, 2, 4 * num_priors) as PriorBox "
                             f"gives it, got {prior.shape_string()}")
        self.num_priors = prior.shape_at(2) // 4
        if bottom[0].count(1) != self.num_priors * self.loc_classes * 4:
            raise self.error(f"number of priors must match number of location predictions: "
                             f"{self.num_priors} priors x {self.loc_classes} x 4 != "
                             f"{bottom[0].count(1)} per image")
        if bottom[1].count(1) != self.num_priors * self.num_classes:
            raise self.error(f"number of priors must match number of confidence predictions: "
                             f"{self.num_priors} priors x {self.num_classes} classes != "
                             f"{bottom[1].count(1)} per image")
        if bottom[3].num_axes < 1 or bottom[3].shape_at(-1) != 8:
            raise self.error(f"the label bottom must hold rows of 8 values (1, 1, num_gt, 8), "
                             f"got {bottom[3].shape_string()}")

    # --- forward --------------------------------------------------------------------------
    def forward_cpu(self, bottom, top):
        p = self.p
        num, priors_n = bottom[0].shape_at(0), self.num_priors
        loc = bottom[0].cpu_data.reshape(num, priors_n, self.loc_classes, 4)
        conf = bottom[1].cpu_data.reshape(num, priors_n, self.num_classes)
        priors, variances = matching.read_priors(bottom[2].cpu_data, priors_n)
        try:
            truths = matching.read_ground_truth(bottom[3].cpu_data, num, self.background,
                                                p.use_difficult_gt)
            match, overlaps, present = self._find_matches(truths, loc, priors, variances)
            self._check_labels(truths, match)
            pos = self._encode_loc(truths, match, loc, priors, variances)
            if self.mining != _P.NONE:
                match, negatives = self._mine(truths, match, overlaps, present, loc, conf,
                                              priors, variances, pos)
                pos = self._encode_loc(truths, match, loc, priors, variances)
            else:
                negatives = None
        except ValueError as error:
            raise self.error(str(error)) from None
        self.num_matches = len(pos[1])
        loc_loss = self._loc_loss(pos)
        conf_loss = self._conf_loss(truths, match, present, negatives, conf)
        self.scale = normalizer(self.normalization, num, priors_n, self.num_matches)
        total = np.float32(0)
        if self.include[0]:
            total += np.float32(p.loc_weight) * loc_loss / np.float32(self.scale)
        if self.include[1]:
            total += conf_loss / np.float32(self.scale)
        top[0].data[...] = total

    def _find_matches(self, truths, loc, priors, variances):
        """The fork's FindMatches: match indices and overlaps (N, L, P), and which (image,
        location class) entries exist (images without ground truth have none)."""
        p = self.p
        num, shape = len(truths), (len(truths), self.loc_classes, self.num_priors)
        match = np.full(shape, matching.NO_MATCH, np.int32)
        overlaps = np.zeros(shape, np.float32)
        present = np.zeros(shape[:2], bool)
        classes = [c for c in range(self.loc_classes)
                   if p.share_location or c != self.background]
        for i in range(num):
            truth = truths[i]
            if truth is None:
                continue
            present[i, classes] = True
            if p.use_prior_for_matching:
                indices, ious = matching.match_boxes(
                    truth.boxes, priors, p.match_type, p.overlap_threshold,
                    p.ignore_cross_boundary_bbox)
                for c in classes:
                    overlaps[i, c] = ious
                    if p.share_location:
                        match[i, c] = indices
                    else:
                        hit = indices > matching.NO_MATCH
                        hit[hit] = truth.labels[indices[hit]] == c
                        match[i, c] = np.where(hit, indices, matching.NO_MATCH)
                continue
            for c in classes:
                decoded = decode_boxes(priors, variances, p.code_type,
                                       p.encode_variance_in_target, False, loc[i, :, c])
                rows = (np.arange(len(truth)) if p.share_location
                        else np.flatnonzero(truth.labels == c))
                indices, overlaps[i, c] = matching.match_boxes(
                    truth.boxes[rows], decoded, p.match_type, p.overlap_threshold,
                    p.ignore_cross_boundary_bbox)
                hit = indices > matching.NO_MATCH
                match[i, c] = indices
                match[i, c, hit] = rows[indices[hit]]
        return match, overlaps, present

    def _check_labels(self, truths, match):
        """A matched ground truth's label must be a class of the conf blob (the fork CHECKs
        it, or writes out of bounds for LOGISTIC)."""
        if self.p.map_object_to_agnostic and self.mining == _P.NONE:
            return
        for i, truth in enumerate(truths):
            if truth is None:
                continue
            used = truth.labels[np.unique(match[i][match[i] > matching.NO_MATCH])]
            bad = used[(used < 0) | (used >= self.num_classes)]
            if len(bad):
                raise ValueError(f"ground-truth label {int(bad[0])} is out of range for "
                                 f"num_classes {self.num_classes}")

    def _encode_loc(self, truths, match, loc, priors, variances):
        """The fork's EncodeLocPrediction: (positions (i, c, j), predictions, targets) of the
        matched predictions in (image, class, prior) order."""
        p = self.p
        where = np.nonzero(match > matching.NO_MATCH)
        ii, cc, jj = where
        boxes = np.empty((len(ii), 4), np.float32)
        for i in np.unique(ii):
            rows = ii == i
            boxes[rows] = truths[i].boxes[match[i][cc[rows], jj[rows]]]
        pred = loc[ii, jj, cc].astype(np.float32)
        target = encode_boxes(priors[jj], variances[jj], p.code_type,
                              p.encode_variance_in_target, boxes)
        if p.bp_inside:
            inside = priors[jj]
            if not p.use_prior_for_matching:
                inside = decode_boxes(priors[jj], variances[jj], p.code_type,
                                      p.encode_variance_in_target, False, pred)
            pred = np.where((inside < 0) | (inside > 1), target, pred)
        if p.encode_variance_in_target and len(ii):
            if not np.all(variances[jj] > 0):
                raise ValueError("encode_variance_in_target needs positive prior variances")
            pred = pred / variances[jj]
            target = target / variances[jj]
        return where, pred, target

    def _mine(self, truths, match, overlaps, present, loc, conf, priors, variances, pos):
        """The fork's MineHardExamples (one location class: mining needs share_location)."""
        p = self.p
        labels = self._matched_labels(truths, match[:, 0], agnostic=False)
        losses = self._conf_terms(conf, labels)[0]
        if self.mining == _P.HARD_EXAMPLE and len(pos[0]):
            (ii, _, jj), pred, target = pos
            losses[ii, jj] += self._loc_terms(pred - target)[0].sum(axis=1)
        nms = None
        if p.HasField("nms_param") and p.nms_param.nms_threshold > 0:
            nms = (None, p.nms_param.nms_threshold, p.nms_param.top_k)
        negatives = [None] * len(truths)
        match = match.copy()
        for i in np.flatnonzero(present[:, 0]):
            if nms is not None:
                boxes = priors if p.use_prior_for_nms else decode_boxes(
                    priors, variances, p.code_type, p.encode_variance_in_target, False,
                    loc[i, :, 0])
                nms = (boxes,) + nms[1:]
            match[i, 0], negatives[i] = matching.mine_image(
                match[i, 0], overlaps[i, 0], losses[i], self.mining, p.neg_pos_ratio,
                p.neg_overlap, p.sample_size, nms)
        return match, negatives

    def _matched_labels(self, truths, match, agnostic):
        """(N, P) class of each prior: its ground truth's label (background_label_id + 1
        when ``agnostic``) where matched, else background_label_id."""
        labels = np.full(match.shape, self.background, np.int64)
        for i, truth in enumerate(truths):
            hit = match[i] > matching.NO_MATCH
            if truth is not None and hit.any():
                labels[i, hit] = (self.background + 1 if agnostic
                                  else truth.labels[match[i, hit]])
        return labels

    def _conf_terms(self, x, labels=None, targets=None):
        """Per-prior confidence losses (ComputeConfLoss) and their gradients over the last
        axis of ``x``: softmax cross-entropy against integer ``labels``, or sigmoid
        cross-entropy against ``targets`` (one-hot of ``labels`` when not given)."""
        if self.p.conf_loss_type == _P.SOFTMAX:
            shifted = x - x.max(axis=-1, keepdims=True)
            exp = np.exp(shifted)
            prob = exp / exp.sum(axis=-1, keepdims=True)
            picked = np.take_along_axis(prob, labels[..., None], axis=-1)[..., 0]
            loss = -np.log(np.maximum(picked, FLT_MIN))
            grad = prob
            np.put_along_axis(grad, labels[..., None],
                              np.take_along_axis(prob, labels[..., None], axis=-1) - 1, -1)
            return loss.astype(np.float32), grad
        if targets is None:
            targets = (np.arange(x.shape[-1]) == labels[..., None]).astype(np.float32)
        positive = (x >= 0).astype(np.float32)
        terms = x * (targets - positive) - np.log1p(np.exp(x - 2 * x * positive))
        grad = (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32) - targets
        return (-terms.astype(np.float64).sum(axis=-1)).astype(np.float32), grad

    def _loc_terms(self, d):
        """SMOOTH_L1 or L2 (d^2 / 2) terms of offsets ``d`` and their gradients."""
        if self.p.loc_loss_type == _P.SMOOTH_L1:
            small = np.abs(d) < 1
            return (np.where(small, np.float32(0.5) * d * d, np.abs(d) - np.float32(0.5)),
                    np.where(small, d, np.sign(d)).astype(np.float32))
        return np.float32(0.5) * d * d, d

    def _loc_loss(self, pos):
        self._loc_where, pred, target = pos
        terms, self._loc_grad = self._loc_terms(pred - target)
        return np.float32(terms.astype(np.float64).sum())

    def _conf_loss(self, truths, match, present, negatives, conf):
        """The fork's EncodeConfPrediction and its confidence loss layer: every prior
        without mining, else each image's positives then its mined negatives."""
        agnostic = self.p.map_object_to_agnostic
        logistic = self.p.conf_loss_type == _P.LOGISTIC
        if negatives is None:
            rows = conf.reshape(-1, self.num_classes)
            labels = np.full(match.shape[::2], self.background, np.int64)
            targets = np.full(conf.shape, np.float32(self.background)) if logistic else None
            for c in range(self.loc_classes):
                hit = present[:, c, None] & (match[:, c] > matching.NO_MATCH)
                found = self._matched_labels(truths, match[:, c], agnostic)
                labels = np.where(hit, found, labels)
                if logistic:
                    ii, jj = np.nonzero(hit)
                    targets[ii, jj, found[ii, jj]] = 1
            self._conf_rows = None
        else:
            ii, jj, labels, negative = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [
                np.zeros(0, np.int64)], [np.zeros(0, bool)]
            found = self._matched_labels(truths, match[:, 0], agnostic)
            for i in np.flatnonzero(present[:, 0]):
                positives = np.flatnonzero(match[i, 0] > matching.NO_MATCH)
                count = len(positives) + len(negatives[i])
                ii.append(np.full(count, i, np.int64))
                jj += [positives, negatives[i]]
                labels += [found[i, positives],
                           np.full(len(negatives[i]), self.background, np.int64)]
                negative.append(np.arange(count) >= len(positives))
            ii, jj, labels, negative = (np.concatenate(a) for a in (ii, jj, labels, negative))
            rows = conf[ii, jj]
            self._conf_rows = (ii, jj)
            if logistic:
                targets = np.full(rows.shape, np.float32(self.background))
                hot = ~negative | (self.background < self.num_classes)
                targets[np.flatnonzero(hot), labels[hot]] = 1
        if rows.size == 0:
            self._conf_grad = np.zeros(rows.shape, np.float32)
            return np.float32(0)
        labels = labels.reshape(-1)
        if logistic:
            targets = targets.reshape(rows.shape)
            terms, self._conf_grad = self._conf_terms(rows, targets=targets)
        else:
            terms, self._conf_grad = self._conf_terms(rows, labels)
        return np.float32(terms.astype(np.float64).sum())

    # --- backward -------------------------------------------------------------------------
    def backward_cpu(self, top, propagate_down, bottom):
        for i, what in ((2, "prior"), (3, "label")):
            if propagate_down[i]:
                raise self.error(f"MultiBoxLoss layer cannot backpropagate to {what} inputs")
        alpha = np.float32(top[0].cpu_diff[()] / np.float32(self.scale))
        if propagate_down[0]:
            diff = bottom[0].diff
            diff[...] = 0
            if self.num_matches:
                view = diff.reshape(diff.shape[0], self.num_priors, self.loc_classes, 4)
                ii, cc, jj = self._loc_where
                view[ii, jj, cc] = self._loc_grad * np.float32(self.p.loc_weight) * alpha
        if propagate_down[1]:
            diff = bottom[1].diff
            diff[...] = 0
            view = diff.reshape(diff.shape[0], self.num_priors, self.num_classes)
            if self._conf_rows is None:
                view[...] = self._conf_grad.reshape(view.shape) * alpha
            elif len(self._conf_rows[0]):
                view[self._conf_rows] = self._conf_grad * alpha

    def forward_gpu(self, bottom, top):
        """The fork has no CUDA code for MultiBoxLoss: the same computation, on the host."""
        self.forward_cpu(bottom, top)

    def backward_gpu(self, top, propagate_down, bottom):
        """Through the host, as forward_gpu."""
        self.backward_cpu(top, propagate_down, bottom)

    def allow_force_backward(self, bottom_index):
        """Only loc and conf can take gradients."""
        return bottom_index < 2
