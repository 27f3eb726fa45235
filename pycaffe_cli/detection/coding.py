"""SSD's box coding (src/caffe/util/bbox_util.cpp EncodeBBox / DecodeBBox), vectorized.

Every function takes aligned rows: row i of ``boxes`` / ``locations`` is coded against row i
of ``priors`` with row i of ``prior_variances`` (a single (4,) variance row broadcasts).
Boxes are (xmin, ymin, xmax, ymax); results are float32 (N, 4) arrays.

``code_type`` is ``caffe_pb2.PriorBoxParameter.CodeType``:

- CORNER (1): offsets of each corner from the prior's corner;
- CENTER_SIZE (2): centre offset over the prior's size, log of the size ratio;
- CORNER_SIZE (3): corner offsets over the prior's size.

``*_variance_in_target`` True means the variances were already folded into the targets
(nothing is divided or multiplied by them here); False divides the encoding by them (and
multiplies the location by them when decoding).

The arithmetic follows the fork's float order. Where C++ promotes to double (the ``/ 2.`` of
the centres, ``log``/``exp`` and what is computed from their results) we compute in float64
and round to float32 once, as the fork stores the double result into a float field.
"""
import numpy as np

CORNER = 1
CENTER_SIZE = 2
CORNER_SIZE = 3

_NAMES = {CORNER: "CORNER", CENTER_SIZE: "CENTER_SIZE", CORNER_SIZE: "CORNER_SIZE"}


def _check_code_type(code_type):
    if code_type not in _NAMES:
        raise ValueError("unknown box code_type %r: expected CORNER (1), CENTER_SIZE (2) "
                         "or CORNER_SIZE (3)" % (code_type,))


def _rows(array, name):
    array = np.asarray(array, np.float32)
    if array.ndim == 1 and array.size == 4:
        array = array.reshape(1, 4)
    if array.ndim != 2 or array.shape[1] != 4:
        raise ValueError("%s must be rows of 4 numbers, got shape %s" % (name, array.shape))
    return array


def _prior_sizes(priors, what):
    width = priors[:, 2] - priors[:, 0]
    height = priors[:, 3] - priors[:, 1]
    if not (np.all(width > 0) and np.all(height > 0)):
        raise ValueError("%s needs priors of positive width and height (the fork's "
                         "CHECK_GT fails)" % what)
    return width, height


def _check_variances(variances, what):
    if not np.all(variances > 0):
        raise ValueError("%s needs positive prior variances (the fork's CHECK_GT fails)"
                         % what)


def _operands(code_type, priors, prior_variances, values, name, one, function):
    """(priors, variances broadcast to them, values) as float32 rows of four, after checking
    the code type and that there is one row of ``values`` per prior."""
    _check_code_type(code_type)
    priors = _rows(priors, "priors")
    variances = np.broadcast_to(_rows(prior_variances, "prior_variances"), priors.shape)
    values = _rows(values, name)
    if len(values) != len(priors):
        raise ValueError("%s needs one %s per prior, got %d %s for %d priors"
                         % (function, one, len(values), name, len(priors)))
    return priors, variances, values


def encode_boxes(priors, prior_variances, code_type, encode_variance_in_target, boxes):
    """The targets that ``boxes`` are for ``priors`` (SSD's EncodeBBox row by row)."""
    priors, variances, boxes = _operands(code_type, priors, prior_variances, boxes, "boxes",
                                         "box", "encode_boxes")
    out = np.empty(boxes.shape, np.float32)
    if code_type == CORNER:
        out[:] = boxes - priors
        if not encode_variance_in_target:
            _check_variances(variances, "CORNER encoding")
            out /= variances
        return out
    prior_w, prior_h = _prior_sizes(priors, _NAMES[code_type] + " encoding")
    if code_type == CORNER_SIZE:
        out[:] = boxes - priors
        out[:, 0::2] /= prior_w[:, None]
        out[:, 1::2] /= prior_h[:, None]
        if not encode_variance_in_target:
            _check_variances(variances, "CORNER_SIZE encoding")
            out /= variances
        return out
    # CENTER_SIZE
    box_w = boxes[:, 2] - boxes[:, 0]
    box_h = boxes[:, 3] - boxes[:, 1]
    if not (np.all(box_w > 0) and np.all(box_h > 0)):
        raise ValueError("CENTER_SIZE encoding needs boxes of positive width and height "
                         "(the fork's CHECK_GT fails)")
    prior_cx = (priors[:, 0] + priors[:, 2]) / np.float32(2)
    prior_cy = (priors[:, 1] + priors[:, 3]) / np.float32(2)
    box_cx = (boxes[:, 0] + boxes[:, 2]) / np.float32(2)
    box_cy = (boxes[:, 1] + boxes[:, 3]) / np.float32(2)
    out[:, 0] = (box_cx - prior_cx) / prior_w
    out[:, 1] = (box_cy - prior_cy) / prior_h
    log_w = np.log((box_w / prior_w).astype(np.float64))
    log_h = np.log((box_h / prior_h).astype(np.float64))
    if encode_variance_in_target:
        out[:, 2] = log_w
        out[:, 3] = log_h
    else:
        out[:, 0] /= variances[:, 0]
        out[:, 1] /= variances[:, 1]
        out[:, 2] = log_w / variances[:, 2]
        out[:, 3] = log_h / variances[:, 3]
    return out


def decode_boxes(priors, prior_variances, code_type, variance_encoded_in_target, clip,
                 locations):
    """The boxes that ``locations`` predict for ``priors`` (SSD's DecodeBBox row by row),
    clipped to [0, 1] when ``clip``."""
    priors, variances, locations = _operands(code_type, priors, prior_variances, locations,
                                             "locations", "location", "decode_boxes")
    scaled = locations if variance_encoded_in_target else variances * locations
    out = np.empty(locations.shape, np.float32)
    if code_type == CORNER:
        out[:] = priors + scaled
    elif code_type == CORNER_SIZE:
        prior_w, prior_h = _prior_sizes(priors, "CORNER_SIZE decoding")
        out[:, 0::2] = priors[:, 0::2] + scaled[:, 0::2] * prior_w[:, None]
        out[:, 1::2] = priors[:, 1::2] + scaled[:, 1::2] * prior_h[:, None]
    else:
        prior_w, prior_h = _prior_sizes(priors, "CENTER_SIZE decoding")
        prior_cx = (priors[:, 0] + priors[:, 2]) / np.float32(2)
        prior_cy = (priors[:, 1] + priors[:, 3]) / np.float32(2)
        center_x = (scaled[:, 0] * prior_w + prior_cx).astype(np.float64)
        center_y = (scaled[:, 1] * prior_h + prior_cy).astype(np.float64)
        with np.errstate(over="ignore"):
            # The fork keeps the sizes in float variables before halving them in double.
            width = (np.exp(scaled[:, 2].astype(np.float64)) * prior_w).astype(np.float32)
            height = (np.exp(scaled[:, 3].astype(np.float64)) * prior_h).astype(np.float32)
            half_w = width.astype(np.float64) / 2
            half_h = height.astype(np.float64) / 2
            out[:, 0] = center_x - half_w
            out[:, 1] = center_y - half_h
            out[:, 2] = center_x + half_w
            out[:, 3] = center_y + half_h
    if clip:
        np.clip(out, np.float32(0), np.float32(1), out=out)
    return out
