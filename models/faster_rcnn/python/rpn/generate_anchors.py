"""Reference boxes ("anchors") of a region proposal network, as py-faster-rcnn makes them.

Boxes are ``(x1, y1, x2, y2)`` in pixels with inclusive corners: a box's width is
``x2 - x1 + 1``. The anchors sit around the centre of the ``base_size`` square whose top-left
pixel is (0, 0); the proposal layer shifts them to every cell of the feature map.
"""
import numpy as np

RATIOS = (0.5, 1.0, 2.0)
SCALES = (8, 16, 32)


def box_shape(box):
    """``(width, height, x_centre, y_centre)`` of an inclusive-corner box."""
    width = box[2] - box[0] + 1
    height = box[3] - box[1] + 1
    return width, height, box[0] + 0.5 * (width - 1), box[1] + 0.5 * (height - 1)


def boxes_around(widths, heights, x_centre, y_centre):
    """Inclusive-corner boxes of the given sizes (arrays) around one centre, one per row."""
    half_w = 0.5 * (np.asarray(widths, dtype=np.float64) - 1)
    half_h = 0.5 * (np.asarray(heights, dtype=np.float64) - 1)
    return np.stack([x_centre - half_w, y_centre - half_h,
                     x_centre + half_w, y_centre + half_h], axis=1)


def ratio_boxes(box, ratios):
    """Boxes of about ``box``'s area with height/width = each ratio, sides rounded to pixels
    (numpy's round: halves go to the even neighbour, as in py-faster-rcnn)."""
    width, height, x_centre, y_centre = box_shape(box)
    widths = np.round(np.sqrt(width * height / np.asarray(ratios, dtype=np.float64)))
    heights = np.round(widths * np.asarray(ratios, dtype=np.float64))
    return boxes_around(widths, heights, x_centre, y_centre)


def scale_boxes(box, scales):
    """``box`` enlarged by each scale about its centre."""
    width, height, x_centre, y_centre = box_shape(box)
    scales = np.asarray(scales, dtype=np.float64)
    return boxes_around(width * scales, height * scales, x_centre, y_centre)


def generate_anchors(base_size=16, ratios=RATIOS, scales=SCALES):
    """The ``len(ratios) * len(scales)`` anchors, ratio-major (all scales of the first ratio,
    then the next), as a float64 array of shape (A, 4).

    For the defaults the first row is (-84, -40, 99, 55) and the last (-168, -344, 183, 359).
    """
    base = np.array([0, 0, base_size - 1, base_size - 1], dtype=np.float64)
    return np.concatenate([scale_boxes(box, scales) for box in ratio_boxes(base, ratios)])


def anchors_from_params(params):
    """The anchors a layer's param_str asks for (base_size, ratios, scales; py-faster-rcnn's
    defaults where it names none)."""
    return generate_anchors(params.get("base_size", 16), params.get("ratios", RATIOS),
                            params.get("scales", SCALES))
