"""Bounding-box annotations carried through SSD's data augmentation (SSD's Caffe fork:
bbox_util.cpp's ClipBBox, ProjectBBox, MeetEmitConstraint, ExtrapolateBBox, im_transforms.cpp's
UpdateBBoxByResizePolicy and data_transformer.cpp's TransformAnnotation).

Boxes are normalized ``[xmin, ymin, xmax, ymax]`` in float32, computed with the same float32
operations in the same order as the fork, so a box comes out bit for bit as the fork's does.
Like a NormalizedBBox, a box may carry a ``size`` (NaN: unset) that the fork's BBoxSize returns
instead of computing the area: ClipBBox sets it, and later steps (a resize policy, a mirror)
move the corners without updating it. Coverage and overlap tests read that stale size, as in
the fork.

A crop, an expansion and the final transform all go through ``transform_boxes``:

    keep = emit_constraint(src, box)            (when the layer sets emit_constraint)
    box  = (box - src.min) / (src.max - src.min), clipped to [0, 1]; dropped when empty
    box  = mirrored (x -> 1 - x) and extrapolated (FIT_SMALL_SIZE with height/width_scale)
"""
from dataclasses import dataclass

import numpy as np

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.proto import caffe_pb2

F32 = np.float32
_ZERO, _ONE, _TWO = F32(0), F32(1), F32(2)
_RESIZE = caffe_pb2.ResizeParameter


@dataclass
class Boxes:
    """The boxes of one image, in annotation-group order.

    Attributes:
        coords: (N, 4) float32 [xmin, ymin, xmax, ymax], normalized.
        size: (N,) float32, the NormalizedBBox size field (NaN where unset).
        group: (N,) int64 group_label of each box's AnnotationGroup.
        instance: (N,) int64 instance_id.
        difficult: (N,) bool.
    """
    coords: np.ndarray
    size: np.ndarray
    group: np.ndarray
    instance: np.ndarray
    difficult: np.ndarray

    def __len__(self):
        return len(self.coords)

    def subset(self, keep, coords, size):
        return Boxes(coords[keep], size[keep], self.group[keep], self.instance[keep],
                     self.difficult[keep])

    @classmethod
    def from_datum(cls, anno_datum):
        """The boxes of a caffe.AnnotatedDatum's annotation groups."""
        rows, sizes, groups, instances, difficult = [], [], [], [], []
        for group in anno_datum.annotation_group:
            for annotation in group.annotation:
                box = annotation.bbox
                rows.append((box.xmin, box.ymin, box.xmax, box.ymax))
                sizes.append(box.size if box.HasField("size") else np.nan)
                groups.append(group.group_label)
                instances.append(annotation.instance_id)
                difficult.append(box.difficult)
        return cls(np.array(rows, F32).reshape(-1, 4), np.array(sizes, F32),
                   np.array(groups, np.int64), np.array(instances, np.int64),
                   np.array(difficult, bool))

    def label_rows(self, item_id):
        """(N, 8) float32 rows [item_id, group_label, instance_id, xmin, ymin, xmax, ymax,
        difficult], as the fork's AnnotatedData layer writes its label top."""
        rows = np.empty((len(self), 8), F32)
        rows[:, 0] = item_id
        rows[:, 1] = self.group
        rows[:, 2] = self.instance
        rows[:, 3:7] = self.coords
        rows[:, 7] = self.difficult
        return rows


def box(xmin, ymin, xmax, ymax):
    """A float32 [xmin, ymin, xmax, ymax] array (one box)."""
    return np.array([xmin, ymin, xmax, ymax], F32)


def box_sizes(coords, size=None):
    """The fork's BBoxSize (normalized): 0 for an inverted box, else the size field where set,
    else width * height."""
    coords = np.asarray(coords, F32).reshape(-1, 4)
    width = coords[:, 2] - coords[:, 0]
    height = coords[:, 3] - coords[:, 1]
    area = width * height
    if size is not None:
        size = np.asarray(size, F32)
        area = np.where(np.isnan(size), area, size)
    return np.where((width < 0) | (height < 0), _ZERO, area).astype(F32)


def clip_boxes(coords):
    """ClipBBox: corners clipped to [0, 1]; returns (coords, size) with the size recomputed."""
    clipped = np.clip(np.asarray(coords, F32), _ZERO, _ONE).astype(F32)
    return clipped, box_sizes(clipped)


def intersect(coords, other):
    """IntersectBBox of each box with the one box ``other`` ([0, 0, 0, 0] when apart)."""
    coords = np.asarray(coords, F32).reshape(-1, 4)
    apart = ((other[0] > coords[:, 2]) | (other[2] < coords[:, 0])
             | (other[1] > coords[:, 3]) | (other[3] < coords[:, 1]))
    inter = np.empty_like(coords)
    inter[:, :2] = np.maximum(coords[:, :2], other[:2])
    inter[:, 2:] = np.minimum(coords[:, 2:], other[2:])
    inter[apart] = _ZERO
    return inter


def coverage(coords, size, other):
    """BBoxCoverage(box, other): the part of each box's size that ``other`` covers."""
    inter = box_sizes(intersect(coords, other))
    own = box_sizes(coords, size)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = inter / own
    return np.where(inter > 0, ratio, _ZERO).astype(F32)


def meet_emit_constraint(src, coords, size, constraint):
    """MeetEmitConstraint: which boxes a crop ``src`` keeps. CENTER keeps a box whose centre
    lies in ``src`` (borders included); MIN_OVERLAP one that ``src`` covers more than
    ``emit_overlap`` of."""
    coords = np.asarray(coords, F32).reshape(-1, 4)
    if constraint.emit_type == caffe_pb2.EmitConstraint.CENTER:
        x_center = (coords[:, 0] + coords[:, 2]) / _TWO
        y_center = (coords[:, 1] + coords[:, 3]) / _TWO
        return ((x_center >= src[0]) & (x_center <= src[2])
                & (y_center >= src[1]) & (y_center <= src[3]))
    return coverage(coords, size, src) > F32(constraint.emit_overlap)


def project_boxes(src, coords):
    """ProjectBBox: boxes in the coordinates of the crop ``src``, clipped to it.

    Returns:
        (keep, coords, size): which boxes overlap ``src`` with a non-empty clipped area, and
        the projected, clipped boxes with their sizes (rows of dropped boxes are meaningless).
    """
    src = np.asarray(src, F32)
    coords = np.asarray(coords, F32).reshape(-1, 4)
    overlaps = ~((coords[:, 0] >= src[2]) | (coords[:, 2] <= src[0])
                 | (coords[:, 1] >= src[3]) | (coords[:, 3] <= src[1]))
    width, height = src[2] - src[0], src[3] - src[1]
    projected = np.empty_like(coords)
    with np.errstate(divide="ignore", invalid="ignore"):
        projected[:, 0] = (coords[:, 0] - src[0]) / width
        projected[:, 1] = (coords[:, 1] - src[1]) / height
        projected[:, 2] = (coords[:, 2] - src[0]) / width
        projected[:, 3] = (coords[:, 3] - src[1]) / height
    projected, size = clip_boxes(projected)
    return overlaps & (size > 0), projected, size


def resize_policy_boxes(param, old_width, old_height, coords):
    """UpdateBBoxByResizePolicy: boxes of an ``old_width`` x ``old_height`` image in the
    normalized coordinates of the image ``resize_param`` makes of it (padding included)."""
    new_height, new_width = F32(param.height), F32(param.width)
    old_w, old_h = F32(old_width), F32(old_height)
    orig_aspect = old_w / old_h
    new_aspect = new_width / new_height
    coords = np.asarray(coords, F32).reshape(-1, 4)
    x_min, x_max = coords[:, 0] * old_w, coords[:, 2] * old_w
    y_min, y_max = coords[:, 1] * old_h, coords[:, 3] * old_h
    mode = param.resize_mode
    if mode == _RESIZE.FIT_SMALL_SIZE:
        if orig_aspect < new_aspect:
            new_height = new_width / orig_aspect
        else:
            new_width = orig_aspect * new_height
    if mode == _RESIZE.FIT_LARGE_SIZE_AND_PAD and orig_aspect > new_aspect:
        padding = (new_height - new_width / orig_aspect) / _TWO
        x_min = np.maximum(_ZERO, x_min * new_width / old_w)
        x_max = np.minimum(new_width, x_max * new_width / old_w)
        y_min = padding + np.maximum(_ZERO, y_min * (new_height - _TWO * padding) / old_h)
        y_max = padding + np.minimum(new_height, y_max * (new_height - _TWO * padding) / old_h)
    elif mode == _RESIZE.FIT_LARGE_SIZE_AND_PAD:
        padding = (new_width - orig_aspect * new_height) / _TWO
        x_min = padding + np.maximum(_ZERO, x_min * (new_width - _TWO * padding) / old_w)
        x_max = padding + np.minimum(new_width, x_max * (new_width - _TWO * padding) / old_w)
        y_min = np.maximum(_ZERO, y_min * new_height / old_h)
        y_max = np.minimum(new_height, y_max * new_height / old_h)
    else:   # WARP, FIT_SMALL_SIZE
        x_min = np.maximum(_ZERO, x_min * new_width / old_w)
        x_max = np.minimum(new_width, x_max * new_width / old_w)
        y_min = np.maximum(_ZERO, y_min * new_height / old_h)
        y_max = np.minimum(new_height, y_max * new_height / old_h)
    return np.stack([x_min / new_width, y_min / new_height, x_max / new_width,
                     y_max / new_height], axis=1).astype(F32)


def extrapolate_boxes(param, height, width, crop, coords):
    """ExtrapolateBBox: FIT_SMALL_SIZE with height_scale and width_scale rescales the boxes
    of a crop by crop size / scale; any other resize leaves them alone.

    Raises:
        CaffeError: the crop is smaller than height_scale x width_scale (the fork aborts).
    """
    height_scale, width_scale = F32(param.height_scale), F32(param.width_scale)
    if not (height_scale > 0 and width_scale > 0
            and param.resize_mode == _RESIZE.FIT_SMALL_SIZE):
        return coords
    orig_aspect = F32(width) / F32(height)
    resize_height, resize_width = F32(param.height), F32(param.width)
    if orig_aspect < resize_width / resize_height:
        resize_height = resize_width / orig_aspect
    else:
        resize_width = resize_height * orig_aspect
    crop_height = resize_height * (crop[3] - crop[1])
    crop_width = resize_width * (crop[2] - crop[0])
    if crop_width < width_scale or crop_height < height_scale:
        raise CaffeError(f"resize_param height_scale x width_scale ({param.height_scale} x "
                         f"{param.width_scale}) is larger than the crop "
                         f"({crop_height:g} x {crop_width:g})")
    out = np.array(coords, F32)
    out[:, 0] = out[:, 0] * crop_width / width_scale
    out[:, 2] = out[:, 2] * crop_width / width_scale
    out[:, 1] = out[:, 1] * crop_height / height_scale
    out[:, 3] = out[:, 3] * crop_height / height_scale
    return out


def transform_boxes(boxes, src, emit_constraint=None, mirror=False, resize=None,
                    image_size=None):
    """TransformAnnotation: the boxes that survive a crop (or expansion) to ``src``.

    Args:
        boxes: Boxes of the image before the step.
        src: float32 [xmin, ymin, xmax, ymax] of the crop, normalized to the image (for an
            expansion it reaches outside [0, 1]).
        emit_constraint: caffe.EmitConstraint, or None to keep every overlapping box.
        mirror: flip the boxes horizontally after projecting them.
        resize: caffe.ResizeParameter the image was resized by before cropping, or None.
        image_size: (height, width) of the image before that resize (needed with ``resize``).

    Returns:
        Boxes, in the same order.
    """
    coords, size = boxes.coords, boxes.size
    if resize is not None:
        coords = resize_policy_boxes(resize, image_size[1], image_size[0], coords)
    keep = np.ones(len(boxes), bool)
    if emit_constraint is not None:
        keep = meet_emit_constraint(src, coords, size, emit_constraint)
    overlaps, coords, size = project_boxes(src, coords)
    keep &= overlaps
    if mirror:
        coords = coords.copy()
        coords[:, 0], coords[:, 2] = _ONE - coords[:, 2], _ONE - coords[:, 0]
    if resize is not None and keep.any():
        coords = extrapolate_boxes(resize, image_size[0], image_size[1], src, coords)
    return boxes.subset(keep, coords, size)
