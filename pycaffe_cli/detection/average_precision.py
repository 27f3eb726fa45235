"""Average precision and mean average precision as SSD's Caffe fork computes them.

The fork scores a detector from the rows its DetectionEvaluate layer writes (rows of five
numbers): ``[-1, label, num_pos, -1, -1]`` gives the number of ground-truth boxes of a class
in a batch, ``[item_id, label, score, tp, fp]`` one detection, a true positive (tp = 1) or a
false positive (fp = 1). ``DetectionResults`` gathers these rows over the test batches (the
fork's Solver::TestDetection), and ``compute_ap`` turns one class's detections into an
average precision (the fork's ComputeAP in src/caffe/util/bbox_util.cpp):

- detections are sorted by score, highest first (a stable sort: equal scores keep their
  order), and the true and false positives summed cumulatively (the fork's CumSum);
- precision_i = tp_i / (tp_i + fp_i), recall_i = tp_i / num_pos, in float32;
- "11point" (VOC2007): the mean over r = 0, 0.1, ..., 1 of the highest precision at a recall
  >= r; "MaxIntegral" (VOC2012, ILSVRC): the area under the precision curve made monotone
  (each precision replaced by the highest at that recall or beyond); "Integral": the plain
  sum of precision_i * (recall_i - recall_(i-1)). Recall steps under 1e-6 are skipped.

A class with no detections, or with no positives, has AP 0. The mean AP divides by every
class that has a num_pos row, positives or not, as the fork does; the fork logs a WARNING
for each such class without detections.
"""
import math

import numpy as np

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG

AP_VERSIONS = ("11point", "MaxIntegral", "Integral")
ROW_WIDTH = 5
_f32 = np.float32
_EPS = _f32(1e-6)


def check_ap_version(ap_version, field="ap_version"):
    """CaffeError naming ``field`` unless ``ap_version`` is one the fork knows."""
    if ap_version not in AP_VERSIONS:
        known = ", ".join(f'"{name}"' for name in AP_VERSIONS)
        raise CaffeError(f'{field}: "{ap_version}": Unknown ap_version (known: {known})')


def cumulative_sums(pairs):
    """The fork's CumSum: the running sums of the pairs' counts, the pairs ordered by their
    scores, highest first (stable), as an int64 array."""
    scores, counts = _split(pairs)
    order = np.argsort(-scores, kind="stable")
    return np.cumsum(counts[order])


def compute_ap(true_pos, num_pos, false_pos, ap_version):
    """One class's average precision (the fork's ComputeAP).

    Args:
        true_pos, false_pos: lists of (score, 0 or 1), one pair per detection and the same
            scores in both: the detection was a true (false) positive.
        num_pos: the number of ground-truth boxes of the class.
        ap_version: "11point", "MaxIntegral" or "Integral".

    Returns:
        (precision, recall, ap): float32 arrays over the detections sorted by score, and the
        float32 AP (0 with no detections or no positives; the arrays are then empty).

    Raises:
        CaffeError: unknown ap_version, or pairs that do not describe the same detections
            (the fork's CHECKs).
    """
    check_ap_version(ap_version)
    tp_scores, tp = _split(true_pos)
    fp_scores, fp = _split(false_pos)
    if tp.size != fp.size:
        raise CaffeError(f"average precision: {tp.size} true positive entries but "
                         f"{fp.size} false positive entries (tp must have same size as fp)")
    if np.any(np.abs(tp_scores - fp_scores) > _EPS) or np.any(tp != 1 - fp):
        raise CaffeError("average precision: every detection must be exactly one of a true "
                         "positive and a false positive, with the same score in both lists")
    empty = np.zeros(0, np.float32)
    if tp.size == 0 or num_pos == 0:
        return empty, empty, _f32(0)
    tp_sum = cumulative_sums(true_pos)
    fp_sum = cumulative_sums(false_pos)
    if tp_sum[-1] > num_pos:
        raise CaffeError(f"average precision: {tp_sum[-1]} true positives but only {num_pos} "
                         "ground-truth boxes")
    precision = (tp_sum.astype(np.float32) / (tp_sum + fp_sum).astype(np.float32))
    recall = tp_sum.astype(np.float32) / _f32(num_pos)
    ap = _AP_RULES[ap_version](precision.astype(np.float32), recall.astype(np.float32))
    return precision.astype(np.float32), recall.astype(np.float32), _f32(ap)


def _split(pairs):
    if len(pairs) == 0:
        return np.zeros(0, np.float32), np.zeros(0, np.int64)
    scores, counts = zip(*pairs)
    return np.asarray(scores, np.float32), np.asarray(counts, np.int64)


def _eleven_point(precision, recall):
    """Mean over r in {0, 0.1, ..., 1} of max precision at recall >= r, walking the curve
    backwards once as the fork does."""
    max_precs = [_f32(0)] * 11
    start = len(recall) - 1
    for j in range(10, -1, -1):
        for i in range(start, -1, -1):
            if float(recall[i]) < j / 10.0:   # the fork compares with the double j / 10.
                start = i
                if j > 0:
                    max_precs[j - 1] = max_precs[j]
                break
            if max_precs[j] < precision[i]:
                max_precs[j] = precision[i]
    ap = _f32(0)
    for j in range(10, -1, -1):
        ap += max_precs[j] / _f32(11)
    return ap


def _sequential_sum(terms):
    """float32 sum in the order given (the fork's loop; numpy's sum is pairwise)."""
    return np.cumsum(np.asarray(terms, np.float32), dtype=np.float32)[-1] if len(terms) \
        else _f32(0)


def _max_integral(precision, recall):
    """sum over i = n-2 .. 0 of max(precision[i:]) * |recall[i+1] - recall[i]| (steps over
    1e-6 only), plus recall[0] * max(precision)."""
    running_max = np.maximum.accumulate(precision[::-1])[::-1]
    steps = np.abs(recall[1:] - recall[:-1])[::-1]
    terms = np.where(steps > _EPS, running_max[:-1][::-1] * steps, _f32(0))
    return _sequential_sum(list(terms) + [recall[0] * running_max[0]])


def _integral(precision, recall):
    """sum over i of precision[i] * |recall[i] - recall[i-1]| (recall[-1] = 0; steps over
    1e-6 only)."""
    steps = np.abs(recall - np.concatenate([[_f32(0)], recall[:-1]]).astype(np.float32))
    return _sequential_sum(np.where(steps > _EPS, precision * steps, _f32(0)))


_AP_RULES = {"11point": _eleven_point, "MaxIntegral": _max_integral, "Integral": _integral}


class DetectionResults:
    """DetectionEvaluate rows gathered over batches, per output blob (the maps of the fork's
    TestDetection: true and false positives per label, positives per label)."""

    def __init__(self, num_outputs):
        self.true_pos = [{} for _ in range(num_outputs)]
        self.false_pos = [{} for _ in range(num_outputs)]
        self.num_pos = [{} for _ in range(num_outputs)]

    def add(self, output, rows):
        """Add one batch's rows (an array of n x 5 values) of output ``output``.

        Detections that are neither a true nor a false positive (matched to a difficult
        box that is not evaluated) are left out, as the fork does.
        """
        rows = np.asarray(rows, np.float32).reshape(-1, ROW_WIDTH)
        true_pos, false_pos, num_pos = (self.true_pos[output], self.false_pos[output],
                                        self.num_pos[output])
        for item_id, label, score, tp, fp in rows.tolist():
            label = int(label)
            if int(item_id) == -1:
                num_pos[label] = num_pos.get(label, 0) + int(score)
                continue
            tp, fp = int(tp), int(fp)
            if tp == 0 and fp == 0:
                continue
            score = float(_f32(score))
            true_pos.setdefault(label, []).append((score, tp))
            false_pos.setdefault(label, []).append((score, fp))

    def average_precisions(self, output, ap_version):
        """Per-label APs of output ``output`` and their mean, in label order.

        Returns:
            (mAP, {label: AP}, [labels with positives rows but no detections]). The mean
            divides by every label with a num_pos row (those without detections count as
            AP 0); with none it is nan, as the fork's 0 / 0.
        """
        check_ap_version(ap_version)
        aps, missing = {}, []
        total = _f32(0)
        for label in sorted(self.num_pos[output]):
            if label not in self.true_pos[output]:
                missing.append(label)
                continue
            _, _, aps[label] = compute_ap(self.true_pos[output][label],
                                          self.num_pos[output][label],
                                          self.false_pos[output][label], ap_version)
            total += aps[label]
        count = len(self.num_pos[output])
        mean = total / _f32(count) if count else _f32(math.nan)
        return _f32(mean), aps, missing

    def log(self, output, heading, ap_version, show_per_class, suffix=""):
        """Log one output's result as the fork does: a WARNING per label without detections,
        ``class<label>: <AP>`` per label when ``show_per_class``, then
        ``<heading> = <mAP><suffix>`` (the fork's heading: ``    Test net output #<k>:
        <name>``). Returns the mAP."""
        mean, aps, missing = self.average_precisions(output, ap_version)
        for label in sorted(set(aps) | set(missing)):
            if label in missing:
                LOG.warning(f"Missing true_pos for label: {label}")
            elif show_per_class:
                LOG.info(f"class{label}: {float(aps[label]):g}")
        LOG.info(f"{heading} = {float(mean):g}{suffix}")
        return mean


def check_result_blob(shape, name, where):
    """CaffeError unless a blob of ``shape`` holds DetectionEvaluate rows: its width (the
    fourth axis, 1 when there is none, as Caffe's legacy accessor) is 5."""
    width = shape[3] if len(shape) >= 4 else 1
    if width != ROW_WIDTH or len(shape) > 4:
        raise CaffeError(f'{where}: output "{name}" of shape {tuple(shape)} is not a '
                         "DetectionEvaluate result (1 x 1 x n x 5 rows); with detection "
                         "evaluation every output of the net must be one")
