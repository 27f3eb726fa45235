"""Box projection through crop, expansion, mirror and resize policies, and the emit
constraints, against values worked out by hand (SSD's bbox_util.cpp and im_transforms.cpp)."""
import numpy as np
import pytest

from pycaffe_cli.data.annotation import (Boxes, box, box_sizes, clip_boxes, coverage,
                                         extrapolate_boxes, meet_emit_constraint,
                                         project_boxes, resize_policy_boxes, transform_boxes)
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.proto import caffe_pb2

F32 = np.float32
R = caffe_pb2.ResizeParameter


def boxes_of(coords, size=None):
    coords = np.array(coords, F32).reshape(-1, 4)
    count = len(coords)
    size = np.full(count, np.nan, F32) if size is None else np.array(size, F32)
    return Boxes(coords, size, np.arange(count), np.arange(count) + 10, np.zeros(count, bool))


def test_sizes_clip_and_the_size_field():
    coords = np.array([[0.1, 0.2, 0.5, 0.6], [0.5, 0.5, 0.4, 0.9]], F32)
    np.testing.assert_array_equal(box_sizes(coords), [F32(0.4) * F32(0.4), 0])
    # a set size wins, but never for an inverted box
    np.testing.assert_array_equal(box_sizes(coords, [0.7, 0.7]), [F32(0.7), 0])
    clipped, size = clip_boxes([[-0.5, 0.25, 1.5, 0.75]])
    np.testing.assert_array_equal(clipped, [[0, 0.25, 1, 0.75]])
    np.testing.assert_array_equal(size, [0.5])


def test_project_onto_a_crop():
    keep, coords, size = project_boxes(box(0.5, 0.5, 1.0, 1.0),
                                       [[0.6, 0.7, 0.8, 0.9], [0.0, 0.0, 0.5, 0.6],
                                        [0.25, 0.25, 0.75, 0.75], [0.9, 0.9, 1.2, 1.0]])
    # touching the crop's edge (xmax == crop xmin) does not count as overlapping
    np.testing.assert_array_equal(keep, [True, False, True, True])
    np.testing.assert_allclose(coords[0], [0.2, 0.4, 0.6, 0.8], rtol=1e-6)
    np.testing.assert_array_equal(coords[2], [0, 0, 0.5, 0.5])
    np.testing.assert_allclose(coords[3], [0.8, 0.8, 1, 1], rtol=1e-6)
    assert size[2] == F32(0.25)


def test_project_onto_an_expansion():
    # a 4 x 2 image (h x w) at (h_off 2, w_off 1) of an 8 x 4 canvas
    expand = np.array([-F32(1) / F32(2), -F32(2) / F32(4), (F32(4) - F32(1)) / F32(2),
                       (F32(8) - F32(2)) / F32(4)], F32)
    keep, coords, _ = project_boxes(expand, [[0, 0, 1, 1], [0.5, 0.25, 1, 0.5]])
    assert keep.all()
    np.testing.assert_allclose(coords, [[0.25, 0.25, 0.75, 0.75], [0.5, 0.375, 0.75, 0.5]],
                               rtol=1e-6)


def test_emit_center_and_min_overlap():
    crop = box(0.25, 0.25, 0.75, 0.75)
    center = caffe_pb2.EmitConstraint(emit_type=caffe_pb2.EmitConstraint.CENTER)
    coords = np.array([[0.0, 0.0, 0.5, 0.5], [0.0, 0.0, 0.4, 0.4], [0.5, 0.5, 1.0, 1.0]], F32)
    # centres (0.25, 0.25) on the border: kept; (0.2, 0.2): dropped; (0.75, 0.75): kept
    np.testing.assert_array_equal(meet_emit_constraint(crop, coords, None, center),
                                  [True, False, True])
    overlap = caffe_pb2.EmitConstraint(emit_type=caffe_pb2.EmitConstraint.MIN_OVERLAP,
                                       emit_overlap=0.25)
    # coverages: 0.0625 / 0.25 = 0.25 (not above), 0.0225 / 0.16, 0.25
    np.testing.assert_allclose(coverage(coords, None, crop), [0.25, 0.0225 / 0.16, 0.25],
                               rtol=1e-6)
    np.testing.assert_array_equal(meet_emit_constraint(crop, coords, None, overlap),
                                  [False, False, False])
    overlap.emit_overlap = 0.2
    np.testing.assert_array_equal(meet_emit_constraint(crop, coords, None, overlap),
                                  [True, False, True])
    # the stale size field is what coverage divides by, as in the fork
    np.testing.assert_array_equal(coverage(coords[:1], [0.125], crop), [0.5])


def test_resize_policies():
    coords = np.array([[0.0, 0.0, 1.0, 1.0], [0.25, 0.5, 0.5, 0.75]], F32)
    warp = R(resize_mode=R.WARP, height=10, width=20)
    np.testing.assert_array_equal(resize_policy_boxes(warp, 8, 4, coords), coords)
    # a wide 8 x 4 (w x h) image into 10 x 10: 5 rows of content, 2.5 rows of padding each side
    pad = R(resize_mode=R.FIT_LARGE_SIZE_AND_PAD, height=10, width=10)
    np.testing.assert_allclose(resize_policy_boxes(pad, 8, 4, coords),
                               [[0, 0.25, 1, 0.75], [0.25, 0.5, 0.5, 0.625]], rtol=1e-6)
    # a tall 4 x 8 one: the padding goes left and right
    np.testing.assert_allclose(resize_policy_boxes(pad, 4, 8, coords),
                               [[0.25, 0, 0.75, 1], [0.375, 0.5, 0.5, 0.75]], rtol=1e-6)
    small = R(resize_mode=R.FIT_SMALL_SIZE, height=10, width=10)
    np.testing.assert_allclose(resize_policy_boxes(small, 8, 4, coords), coords, rtol=1e-6)


def test_extrapolate_only_for_fit_small_size_with_scales():
    coords = np.array([[0.1, 0.2, 0.3, 0.4]], F32)
    crop = box(0, 0, 0.5, 0.5)
    warp = R(resize_mode=R.WARP, height=10, width=10, height_scale=2, width_scale=2)
    np.testing.assert_array_equal(extrapolate_boxes(warp, 4, 4, crop, coords), coords)
    small = R(resize_mode=R.FIT_SMALL_SIZE, height=10, width=10, height_scale=2, width_scale=4)
    # resized to 10 x 10, the crop is 5 x 5: x scaled by 5 / 4, y by 5 / 2
    np.testing.assert_allclose(extrapolate_boxes(small, 4, 4, crop, coords),
                               [[0.125, 0.5, 0.375, 1.0]], rtol=1e-6)
    with pytest.raises(CaffeError, match="height_scale x width_scale"):
        extrapolate_boxes(R(resize_mode=R.FIT_SMALL_SIZE, height=10, width=10,
                            height_scale=8, width_scale=8), 4, 4, crop, coords)


def test_transform_mirrors_after_projecting_and_keeps_order():
    boxes = boxes_of([[0.0, 0.0, 0.25, 0.5], [0.6, 0.6, 0.9, 0.9], [0.5, 0.0, 1.0, 1.0]])
    out = transform_boxes(boxes, box(0.5, 0, 1, 1), mirror=True)
    # the first box is outside the crop; the others projected then flipped
    np.testing.assert_array_equal(out.instance, [11, 12])
    np.testing.assert_allclose(out.coords, [[0.2, 0.6, 0.8, 0.9], [0, 0, 1, 1]], atol=1e-6)
    rows = out.label_rows(3)
    assert rows.shape == (2, 8) and (rows[:, 0] == 3).all()
    np.testing.assert_array_equal(rows[:, 1], [1, 2])


def test_transform_with_resize_uses_the_size_before_resizing():
    boxes = boxes_of([[0.0, 0.0, 1.0, 1.0]])
    pad = R(resize_mode=R.FIT_LARGE_SIZE_AND_PAD, height=10, width=10)
    out = transform_boxes(boxes, box(0, 0, 1, 1), resize=pad, image_size=(4, 8))
    np.testing.assert_allclose(out.coords, [[0, 0.25, 1, 0.75]], rtol=1e-6)


def test_from_datum_reads_groups_in_order():
    datum = caffe_pb2.AnnotatedDatum(type=caffe_pb2.AnnotatedDatum.BBOX)
    group = datum.annotation_group.add(group_label=4)
    bbox = group.annotation.add(instance_id=2).bbox
    bbox.xmin, bbox.ymin, bbox.xmax, bbox.ymax, bbox.difficult = 0.1, 0.2, 0.3, 0.4, True
    datum.annotation_group.add(group_label=7).annotation.add().bbox.size = 0.5
    boxes = Boxes.from_datum(datum)
    np.testing.assert_array_equal(boxes.group, [4, 7])
    np.testing.assert_array_equal(boxes.instance, [2, 0])
    np.testing.assert_array_equal(boxes.difficult, [True, False])
    assert np.isnan(boxes.size[0]) and boxes.size[1] == 0.5
    np.testing.assert_array_equal(boxes.coords[0], np.array([0.1, 0.2, 0.3, 0.4], F32))
