"""Average precision as SSD's fork computes it: the fork's test cases (test_bbox_util.cpp
TestCumSum, TestComputeAP), hand-computed curves, and the per-class / mean reduction."""
import logging

import numpy as np
import pytest

from pycaffe_cli.detection.average_precision import (DetectionResults, check_result_blob,
                                                     compute_ap, cumulative_sums)
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG

# the fork's TestComputeAP data: (score, tp); fp is 1 - tp
PAIRS = [(1.0, 0), (1.0, 1), (0.9, 1), (0.9, 0), (0.8, 1), (0.7, 0), (0.7, 1), (0.6, 0),
         (0.5, 0), (0.4, 0), (0.4, 1)]
TP = [(s, t) for s, t in PAIRS]
FP = [(s, 1 - t) for s, t in PAIRS]
PREC = [0 / 1, 1 / 2, 2 / 3, 2 / 4, 3 / 5, 3 / 6, 4 / 7, 4 / 8, 4 / 9, 4 / 10, 5 / 11]
REC = [0, 0.2, 0.4, 0.4, 0.6, 0.6, 0.8, 0.8, 0.8, 0.8, 1.0]
EPS = 1e-5   # the fork's test tolerance


def test_cumsum_sorts_by_score_descending():
    np.testing.assert_array_equal(cumulative_sums([(0.1, 0), (0.2, 1), (0.3, 0)]), [0, 1, 1])


@pytest.mark.parametrize("version, expected", [
    ("Integral", 0.558528), ("MaxIntegral", 0.591861), ("11point", 0.598662)])
def test_forks_compute_ap_case(version, expected):
    prec, rec, ap = compute_ap(TP, 5, FP, version)
    assert ap == pytest.approx(expected, abs=EPS)
    np.testing.assert_allclose(prec, PREC, atol=EPS)
    np.testing.assert_allclose(rec, REC, atol=EPS)
    assert prec.dtype == rec.dtype == np.float32


@pytest.mark.parametrize("version, expected", [
    ("Integral", 0.558528 - 5 / 11 * 0.2), ("MaxIntegral", 0.591861 - 5 / 11 * 0.2),
    ("11point", 0.598662 - 5 / 11 * 2 / 11)])
def test_forks_compute_ap_case_cut_to_seven(version, expected):
    prec, rec, ap = compute_ap(TP[:7], 5, FP[:7], version)
    assert ap == pytest.approx(expected, abs=EPS)
    np.testing.assert_allclose(prec, PREC[:7], atol=EPS)


def test_hand_computed_curve():
    """tp, fp, tp with 3 positives: precision 1, 1/2, 2/3; recall 1/3, 1/3, 2/3.
    Integral: 1 * 1/3 + 2/3 * 1/3 = 5/9. MaxIntegral: the same (the curve is monotone at
    the recall steps). 11point: r = 0..0.3 -> 1, 0.4..0.6 -> 2/3, 0.7..1 -> 0:
    (4 + 3 * 2/3) / 11 = 6/11."""
    tp = [(0.9, 1), (0.8, 0), (0.7, 1)]
    fp = [(s, 1 - t) for s, t in tp]
    assert compute_ap(tp, 3, fp, "Integral")[2] == pytest.approx(5 / 9, abs=1e-6)
    assert compute_ap(tp, 3, fp, "MaxIntegral")[2] == pytest.approx(5 / 9, abs=1e-6)
    assert compute_ap(tp, 3, fp, "11point")[2] == pytest.approx(6 / 11, abs=1e-6)


def test_order_of_the_pairs_does_not_matter_and_no_positives_gives_zero():
    shuffled = [TP[i] for i in (4, 0, 8, 1, 5, 2, 9, 3, 6, 7, 10)]
    fp = [(s, 1 - t) for s, t in shuffled]
    # equal scores keep their order (a stable sort), so only the order among ties matters
    assert compute_ap(shuffled, 5, fp, "Integral")[2] == pytest.approx(0.558528, abs=EPS)
    assert compute_ap(TP, 0, FP, "Integral")[2] == 0
    assert compute_ap([], 4, [], "11point")[2] == 0


def test_bad_input_is_refused():
    with pytest.raises(CaffeError, match='ap_version: "VOC"'):
        compute_ap(TP, 5, FP, "VOC")
    with pytest.raises(CaffeError, match="exactly one"):
        compute_ap([(0.5, 1)], 5, [(0.5, 1)], "Integral")


def test_results_reduce_to_per_class_ap_and_map(caplog):
    """Two batches of rows for one output; class 1 gets TestComputeAP's detections, class 2
    has positives but no detections (AP 0, a warning), class 3 nothing at all is absent."""
    results = DetectionResults(1)
    rows1 = [[-1, 1, 3, -1, -1], [-1, 2, 1, -1, -1]]
    rows1 += [[0, 1, s, t, 1 - t] for s, t in PAIRS[:6]]
    rows2 = [[-1, 1, 2, -1, -1], [-1, 2, 0, -1, -1], [1, 1, 0.3, 0, 0]]   # 0, 0: ignored
    rows2 += [[1, 1, s, t, 1 - t] for s, t in PAIRS[6:]]
    results.add(0, rows1)
    results.add(0, np.asarray(rows2, np.float32))
    mean, aps, missing = results.average_precisions(0, "Integral")
    assert missing == [2] and list(aps) == [1]
    assert aps[1] == pytest.approx(0.558528, abs=EPS)
    assert mean == pytest.approx(0.558528 / 2, abs=EPS)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        results.log(0, "    Test net output #0: detection_eval", "11point",
                    show_per_class=True)
    lines = [r.getMessage() for r in caplog.records]
    assert "Missing true_pos for label: 2" in lines
    assert "class1: 0.598662" in lines
    assert lines[-1] == f"    Test net output #0: detection_eval = {0.598662 / 2:g}"


def test_result_blob_shape_check():
    check_result_blob((1, 1, 4, 5), "det", "test net #0")
    with pytest.raises(CaffeError, match='output "loss"'):
        check_result_blob((), "loss", "test net #0")
