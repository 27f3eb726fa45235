"""SSD's box coding: the fork's test_bbox_util.cpp numbers, an independent float64 reference,
and round trips, for the three code types with and without the variance in the target."""
import math

import numpy as np
import pytest

from pycaffe_cli.detection.coding import decode_boxes, encode_boxes
from pycaffe_cli.proto import caffe_pb2

CORNER = caffe_pb2.PriorBoxParameter.CORNER
CENTER_SIZE = caffe_pb2.PriorBoxParameter.CENTER_SIZE
CORNER_SIZE = caffe_pb2.PriorBoxParameter.CORNER_SIZE
CODE_TYPES = [CORNER, CENTER_SIZE, CORNER_SIZE]

PRIOR = [0.1, 0.1, 0.3, 0.3]
BOX = [0.0, 0.2, 0.4, 0.5]
VAR_CORNER = [0.1, 0.1, 0.1, 0.1]
VAR_CENTER = [0.1, 0.1, 0.2, 0.2]


def reference_encode(prior, var, code_type, in_target, box):
    """One row, written from the formulas in float64."""
    px0, py0, px1, py1 = map(float, prior)
    bx0, by0, bx1, by1 = map(float, box)
    pw, ph = px1 - px0, py1 - py0
    if code_type == CORNER:
        out = [bx0 - px0, by0 - py0, bx1 - px1, by1 - py1]
    elif code_type == CORNER_SIZE:
        out = [(bx0 - px0) / pw, (by0 - py0) / ph, (bx1 - px1) / pw, (by1 - py1) / ph]
    else:
        out = [((bx0 + bx1) / 2 - (px0 + px1) / 2) / pw,
               ((by0 + by1) / 2 - (py0 + py1) / 2) / ph,
               math.log((bx1 - bx0) / pw), math.log((by1 - by0) / ph)]
    if not in_target:
        out = [o / float(v) for o, v in zip(out, var)]
    return out


def reference_decode(prior, var, code_type, in_target, loc):
    px0, py0, px1, py1 = map(float, prior)
    pw, ph = px1 - px0, py1 - py0
    d = [float(x) if in_target else float(x) * float(v) for x, v in zip(loc, var)]
    if code_type == CORNER:
        return [px0 + d[0], py0 + d[1], px1 + d[2], py1 + d[3]]
    if code_type == CORNER_SIZE:
        return [px0 + d[0] * pw, py0 + d[1] * ph, px1 + d[2] * pw, py1 + d[3] * ph]
    cx, cy = (px0 + px1) / 2 + d[0] * pw, (py0 + py1) / 2 + d[1] * ph
    w, h = math.exp(d[2]) * pw, math.exp(d[3]) * ph
    return [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]


# --- the fork's test_bbox_util.cpp cases ---------------------------------------------------------
@pytest.mark.parametrize("in_target, expected", [
    (True, [-0.1, 0.1, 0.1, 0.2]), (False, [-1, 1, 1, 2])])
def test_encode_corner_as_the_fork(in_target, expected):
    got = encode_boxes([PRIOR], VAR_CORNER, CORNER, in_target, [BOX])
    np.testing.assert_allclose(got[0], expected, atol=1e-6)


@pytest.mark.parametrize("in_target, expected, eps", [
    (True, [0, 0.75, math.log(2.), math.log(1.5)], 1e-6),
    (False, [0, 7.5, math.log(2.) / 0.2, math.log(1.5) / 0.2], 1e-5)])
def test_encode_center_size_as_the_fork(in_target, expected, eps):
    got = encode_boxes([PRIOR], VAR_CENTER, CENTER_SIZE, in_target, [BOX])
    np.testing.assert_allclose(got[0], expected, atol=eps)


@pytest.mark.parametrize("in_target, expected", [
    (False, [0, 0.2, 0.4, 0.5]), (True, [-0.9, 1.1, 1.3, 2.3])])
def test_decode_corner_as_the_fork(in_target, expected):
    got = decode_boxes([PRIOR], VAR_CORNER, CORNER, in_target, False, [[-1, 1, 1, 2]])
    np.testing.assert_allclose(got[0], expected, atol=1e-6)


@pytest.mark.parametrize("in_target, loc", [
    (True, [0, 0.75, math.log(2), math.log(1.5)]),
    (False, [0, 7.5, math.log(2) * 5, math.log(1.5) * 5])])
def test_decode_center_size_as_the_fork(in_target, loc):
    got = decode_boxes([PRIOR], VAR_CENTER, CENTER_SIZE, in_target, False, [loc])
    np.testing.assert_allclose(got[0], BOX, atol=1e-6)


@pytest.mark.parametrize("in_target, step", [(False, 0.1), (True, 1.0)])
def test_decode_several_corner_boxes_as_the_fork(in_target, step):
    i = np.arange(1, 5)
    priors = np.stack([0.1 * i, 0.1 * i, 0.1 * i + 0.2, 0.1 * i + 0.2], 1)
    locs = np.stack([-1 * (i % 2), (i + 1) % 2, (i + 1) % 2, i % 2], 1)
    got = decode_boxes(priors, VAR_CORNER, CORNER, in_target, False, locs)
    expected = np.stack([0.1 * i - i % 2 * step, 0.1 * i + (i + 1) % 2 * step,
                         0.1 * i + 0.2 + (i + 1) % 2 * step, 0.1 * i + 0.2 + i % 2 * step], 1)
    np.testing.assert_allclose(got, expected, atol=1e-6)


@pytest.mark.parametrize("in_target, loc", [
    (True, [0, 0.75, math.log(2.), math.log(1.5)]),
    (False, [0, 7.5, math.log(2.) * 5, math.log(1.5) * 5])])
def test_decode_several_center_size_boxes_as_the_fork(in_target, loc):
    i = np.arange(1, 5)
    priors = np.stack([0.1 * i, 0.1 * i, 0.1 * i + 0.2, 0.1 * i + 0.2], 1)
    got = decode_boxes(priors, np.tile(VAR_CENTER, (4, 1)), CENTER_SIZE, in_target, False,
                       np.tile(loc, (4, 1)))
    expected = np.array(BOX) + 0.1 * (i[:, None] - 1)
    np.testing.assert_allclose(got, expected, atol=1e-5)


# --- an independent reference on random boxes ---------------------------------------------------
def random_boxes(rng, n):
    lo = rng.uniform(0, 0.6, (n, 2))
    size = rng.uniform(0.05, 0.4, (n, 2))
    return np.concatenate([lo, lo + size], 1).astype(np.float32)


@pytest.mark.parametrize("code_type", CODE_TYPES)
@pytest.mark.parametrize("in_target", [True, False])
def test_encode_and_decode_match_the_reference(code_type, in_target):
    rng = np.random.default_rng(code_type * 2 + in_target)
    priors, boxes = random_boxes(rng, 40), random_boxes(rng, 40)
    variances = rng.uniform(0.1, 0.3, (40, 4)).astype(np.float32)
    encoded = encode_boxes(priors, variances, code_type, in_target, boxes)
    assert encoded.dtype == np.float32 and encoded.shape == (40, 4)
    expected = [reference_encode(*row) for row in
                zip(priors, variances, [code_type] * 40, [in_target] * 40, boxes)]
    # float32 rounding of a few operations on values up to ~40 (offsets over a variance)
    np.testing.assert_allclose(encoded, expected, rtol=1e-5, atol=2e-5)
    locs = rng.uniform(-2, 2, (40, 4)).astype(np.float32)
    decoded = decode_boxes(priors, variances, code_type, in_target, False, locs)
    expected = [reference_decode(*row) for row in
                zip(priors, variances, [code_type] * 40, [in_target] * 40, locs)]
    assert decoded.dtype == np.float32
    np.testing.assert_allclose(decoded, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("code_type", CODE_TYPES)
@pytest.mark.parametrize("in_target", [True, False])
def test_decode_undoes_encode(code_type, in_target):
    rng = np.random.default_rng(7)
    priors, boxes = random_boxes(rng, 30), random_boxes(rng, 30)
    variance = np.array(VAR_CENTER, np.float32)  # one row broadcasts to every prior
    encoded = encode_boxes(priors, variance, code_type, in_target, boxes)
    decoded = decode_boxes(priors, variance, code_type, in_target, False, encoded)
    np.testing.assert_allclose(decoded, boxes, atol=1e-6)


def test_clip_keeps_boxes_in_the_unit_square():
    loc = [[-5, -5, 5, 5], [0.1, 0.1, 0.1, 0.1]]
    clipped = decode_boxes([PRIOR, PRIOR], VAR_CORNER, CORNER, True, True, loc)
    np.testing.assert_allclose(clipped, [[0, 0, 1, 1], [0.2, 0.2, 0.4, 0.4]], atol=1e-6)
    unclipped = decode_boxes([PRIOR, PRIOR], VAR_CORNER, CORNER, True, False, loc)
    assert unclipped[0, 0] < 0 and unclipped[0, 2] > 1


def test_unknown_code_type_is_named():
    with pytest.raises(ValueError, match="code_type 4"):
        encode_boxes([PRIOR], VAR_CORNER, 4, True, [BOX])
    with pytest.raises(ValueError, match="code_type 0"):
        decode_boxes([PRIOR], VAR_CORNER, 0, True, False, [BOX])


def test_the_forks_checks_become_value_errors():
    flat_prior = [0.1, 0.1, 0.1, 0.3]
    with pytest.raises(ValueError, match="positive width"):
        encode_boxes([flat_prior], VAR_CORNER, CENTER_SIZE, True, [BOX])
    with pytest.raises(ValueError, match="positive width"):
        decode_boxes([flat_prior], VAR_CORNER, CORNER_SIZE, True, False, [BOX])
    with pytest.raises(ValueError, match="boxes of positive width"):
        encode_boxes([PRIOR], VAR_CORNER, CENTER_SIZE, True, [[0.2, 0.2, 0.2, 0.4]])
    with pytest.raises(ValueError, match="variances"):
        encode_boxes([PRIOR], [0.1, 0, 0.1, 0.1], CORNER, False, [BOX])
    with pytest.raises(ValueError, match="one box per prior"):
        encode_boxes([PRIOR], VAR_CORNER, CORNER, True, [BOX, BOX])
