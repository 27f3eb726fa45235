"""SSD's mapping of normalized detections back to an image's pixels (the fork's OutputBBox,
ClipBBox, ScaleBBox, ProjectBBox in src/caffe/util/bbox_util.cpp) and its name_size_file, as
DetectionOutput's result files and DetectionEvaluate use them."""
import numpy as np

from pycaffe_cli.detection.boxes import box_sizes
from pycaffe_cli.io.input_files import read_input_text
from pycaffe_cli.proto import caffe_pb2

_f32 = np.float32
_RESIZE = caffe_pb2.ResizeParameter


def read_name_sizes(path):
    """The (names, (height, width) pairs) of a name_size_file's ``name height width`` lines;
    like the fork's stream reading, it stops at the first entry that does not parse."""
    tokens = read_input_text(path, "name size file").split()
    names, sizes = [], []
    for start in range(0, len(tokens) - 2, 3):
        name, height, width = tokens[start:start + 3]
        try:
            sizes.append((int(height), int(width)))
        except ValueError:
            break
        names.append(name)
    return names, sizes


def _clip(boxes, height=1.0, width=1.0):
    """SSD's ClipBBox: coordinates clamped to [0, width] x [0, height]."""
    limits = np.array([width, height, width, height], np.float32)
    return np.clip(boxes, _f32(0), limits).astype(np.float32)


def _scale(boxes, height, width):
    """SSD's ScaleBBox: boxes times (width, height); sizes count pixels inclusively unless
    the scale is at most 1 x 1."""
    scaled = (boxes * np.array([width, height, width, height], np.float32)).astype(np.float32)
    return scaled, box_sizes(scaled, normalized=not (width > 1 or height > 1))


def _project(source, boxes):
    """SSD's ProjectBBox of each box into the ``source`` box's frame, clipped to [0, 1];
    a box that does not meet the source stays as it was (the fork leaves it untouched)."""
    sx0, sy0, sx1, sy1 = (_f32(v) for v in source)
    apart = ((boxes[:, 0] >= sx1) | (boxes[:, 2] <= sx0) | (boxes[:, 1] >= sy1)
             | (boxes[:, 3] <= sy0))
    frame = np.array([sx0, sy0, sx0, sy0], np.float32)
    extent = np.array([sx1 - sx0, sy1 - sy0, sx1 - sx0, sy1 - sy0], np.float32)
    projected = _clip((boxes - frame) / extent)
    return np.where(apart[:, None], boxes, projected).astype(np.float32)


def output_boxes(boxes, height, width, resize):
    """SSD's OutputBBox: normalized boxes mapped to an image of ``height`` x ``width``
    pixels, given how it was resized (``resize``, a ResizeParameter, or None).

    Returns:
        (boxes, sizes): float32 pixel boxes and the areas SSD stores with them.
    """
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    if resize is None or resize.resize_mode == _RESIZE.WARP:
        return _scale(_clip(boxes), height, width)
    if resize.resize_mode == _RESIZE.FIT_SMALL_SIZE:
        if resize.height_scale == 0 or resize.width_scale == 0:
            return _scale(_clip(boxes), height, width)
        scaled, _ = _scale(boxes, resize.height_scale, resize.width_scale)
        clipped = _clip(scaled, height, width)
        return clipped, box_sizes(clipped)   # the fork's ClipBBox stores the plain area
    resize_height, resize_width = _f32(resize.height), _f32(resize.width)
    aspect = _f32(width) / _f32(height)
    if aspect > resize_width / resize_height:
        pad = (resize_height - resize_width / aspect) / _f32(2)
        source = (0, pad / resize_height, 1, _f32(1) - pad / resize_height)
    else:
        pad = (resize_width - resize_height * aspect) / _f32(2)
        source = (pad / resize_width, 0, _f32(1) - pad / resize_width, 1)
    return _scale(_clip(_project(source, boxes)), height, width)
