"""AnnotatedData (SSD's fork): AnnotatedDatums from LMDB, their boxes projected through
crop, mirror, resize, expansion and the batch samplers, the label layout, seeded repeats,
encoded records and the user errors."""
import io

import numpy as np
import pytest
from PIL import Image

from pycaffe_cli import backend
from pycaffe_cli.data.db import open_db
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.blob_proto import fill_blob_proto
from pycaffe_cli.io.prototxt import write_blob_proto
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.synced_memory import Head
from tests.layer_helpers import set_up

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST
F32 = np.float32


def anno_datum(pixels, boxes, label=0, encoded=False, typed=True):
    """boxes: [(group_label, instance_id, xmin, ymin, xmax, ymax, difficult)]."""
    channels, height, width = pixels.shape
    datum = caffe_pb2.Datum(channels=channels, height=height, width=width, label=label)
    if encoded:
        stream = io.BytesIO()
        Image.fromarray(pixels[::-1].transpose(1, 2, 0)).save(stream, format="PNG")
        datum.data, datum.encoded = stream.getvalue(), True
    else:
        datum.data = pixels.tobytes()
    out = caffe_pb2.AnnotatedDatum(datum=datum)
    if typed:
        out.type = caffe_pb2.AnnotatedDatum.BBOX
    groups = {}
    for group_label, instance, xmin, ymin, xmax, ymax, difficult in boxes:
        if group_label not in groups:
            groups[group_label] = out.annotation_group.add(group_label=group_label)
        annotation = groups[group_label].annotation.add(instance_id=instance)
        annotation.bbox.xmin, annotation.bbox.ymin = xmin, ymin
        annotation.bbox.xmax, annotation.bbox.ymax = xmax, ymax
        annotation.bbox.difficult = difficult
    return out


def write_db(path, records):
    db = open_db(str(path), caffe_pb2.DataParameter.LMDB, mode="new")
    txn = db.transaction()
    for index, record in enumerate(records):
        txn.put(f"{index:08d}", record.SerializeToString())
    txn.commit()
    db.close()
    return str(path)


def pattern(shape=(3, 6, 8), seed=0):
    return np.random.default_rng(seed).integers(40, 256, shape, dtype=np.uint8)


def layer(source, batch=1, transform="", anno="", phase=TEST, tops=2, extra=""):
    top_text = 'top: "data" top: "label"' if tops == 2 else 'top: "data"'
    text = (f'name: "data" type: "AnnotatedData" {top_text} data_param {{ source: "{source}" '
            f'batch_size: {batch} backend: LMDB {extra} }} transform_param {{ {transform} }} '
            f"annotated_data_param {{ {anno} }}")
    return set_up(text, [], tops, phase)


def forward(made):
    net_layer, bottom, top = made
    net_layer.reshape(bottom, top)
    net_layer.forward(bottom, top)
    return top[0].data.copy(), (top[1].data.copy() if len(top) > 1 else None)


BOXES = [(1, 0, 0.25, 0.5, 0.75, 1.0, False), (1, 1, 0.0, 0.0, 0.5, 0.5, True),
         (3, 0, 0.5, 0.0, 1.0, 0.5, False)]


@pytest.fixture
def one_image(tmp_path):
    pixels = pattern()
    return write_db(tmp_path / "db", [anno_datum(pixels, BOXES)]), pixels


def rows(item_id, boxes):
    return np.array([[item_id, g, i, x0, y0, x1, y1, d] for g, i, x0, y0, x1, y1, d in boxes],
                    F32)


def test_untransformed_boxes_and_pixels(one_image):
    source, pixels = one_image
    data, label = forward(layer(source, batch=2, transform="scale: 0.5 mean_value: 10"))
    assert data.shape == (2, 3, 6, 8) and label.shape == (1, 1, 6, 8)
    np.testing.assert_array_equal(data[0], (pixels.astype(F32) - 10) * F32(0.5))
    expected = np.concatenate([rows(0, BOXES), rows(1, BOXES)])
    np.testing.assert_array_equal(label[0, 0], expected)


def test_centre_crop_projects_and_clips_the_boxes(one_image):
    source, pixels = one_image
    data, label = forward(layer(source, transform="crop_size: 4"))
    # 6 x 8 image, 4 x 4 centre crop at (1, 2): the crop box is [2/8, 1/6, 6/8, 5/6]
    np.testing.assert_array_equal(data[0], pixels[:, 1:5, 2:6])
    crop = [F32(2) / F32(8), F32(1) / F32(6), F32(6) / F32(8), F32(5) / F32(6)]
    width, height = crop[2] - crop[0], crop[3] - crop[1]

    def project(x0, y0, x1, y1):
        out = [(x0 - crop[0]) / width, (y0 - crop[1]) / height,
               (x1 - crop[0]) / width, (y1 - crop[1]) / height]
        return [min(max(F32(v), F32(0)), F32(1)) for v in out]

    expected = [project(F32(0.25), F32(0.5), F32(0.75), F32(1.0)),
                project(F32(0.0), F32(0.0), F32(0.5), F32(0.5)),
                project(F32(0.5), F32(0.0), F32(1.0), F32(0.5))]
    np.testing.assert_array_equal(label[0, 0, :, 3:7], np.array(expected, F32))
    assert label[0, 0, 0, 3:7] == pytest.approx([0, 0.5, 1, 1])


def test_emit_constraint_center_drops_boxes_whose_centre_is_cropped_away(tmp_path):
    # the box's centre (x 0.125) lies left of the centre crop [0.25, 0.75]
    source = write_db(tmp_path / "db", [anno_datum(pattern(), [(2, 0, 0, 0.3, 0.3, 0.7, 0)])])
    _, kept = forward(layer(source, transform="crop_size: 4"))
    assert kept.shape == (1, 1, 1, 8) and kept[0, 0, 0, 1] == 2
    _, dropped = forward(layer(source, transform="crop_size: 4 emit_constraint { }"))
    np.testing.assert_array_equal(dropped, -np.ones((1, 1, 1, 8), F32))   # the filler row
    # the crop covers 0.05 x 0.4 of the box's 0.3 x 0.4: a coverage of 1/6
    overlap = "crop_size: 4 emit_constraint { emit_type: MIN_OVERLAP emit_overlap: %g }"
    _, covered = forward(layer(source, transform=overlap % 0.16))
    assert covered.shape == (1, 1, 1, 8) and covered[0, 0, 0, 0] == 0
    _, uncovered = forward(layer(source, transform=overlap % 0.17))
    np.testing.assert_array_equal(uncovered, -np.ones((1, 1, 1, 8), F32))


def test_mirror_flips_pixels_and_boxes_together(one_image):
    source, pixels = one_image
    backend.set_random_seed(3)
    made = layer(source, batch=8, transform="mirror: true")
    data, label = forward(made)
    flips = 0
    for item in range(8):
        got = label[0, 0, label[0, 0, :, 0] == item]
        if np.array_equal(data[item], pixels[:, :, ::-1]):
            flips += 1
            np.testing.assert_array_equal(got[:, 3], F32(1) - rows(0, BOXES)[:, 5])
            np.testing.assert_array_equal(got[:, 5], F32(1) - rows(0, BOXES)[:, 3])
        else:
            np.testing.assert_array_equal(data[item], pixels)
            np.testing.assert_array_equal(got[:, 3:7], rows(0, BOXES)[:, 3:7])
    assert 0 < flips < 8


def test_warp_resize_keeps_normalized_boxes(one_image):
    source, _ = one_image
    data, label = forward(layer(source, transform="resize_param { height: 12 width: 10 }"))
    assert data.shape == (1, 3, 12, 10)
    np.testing.assert_allclose(label[0, 0], rows(0, BOXES), atol=1e-6)


def test_fit_large_size_and_pad(tmp_path):
    pixels = pattern((3, 4, 8))
    source = write_db(tmp_path / "db", [anno_datum(pixels, [(1, 0, 0.0, 0.0, 1.0, 1.0, 0)])])
    transform = ("resize_param { resize_mode: FIT_LARGE_SIZE_AND_PAD height: 8 width: 8 "
                 "pad_value: 7 interp_mode: NEAREST }")
    data, label = forward(layer(source, transform=transform))
    # 4 x 8 -> 4 x 8 inside an 8 x 8 canvas, 2 rows of padding above and below
    assert data.shape == (1, 3, 8, 8)
    np.testing.assert_array_equal(data[0, :, 2:6], pixels)
    assert (data[0, :, :2] == 7).all() and (data[0, :, 6:] == 7).all()
    np.testing.assert_array_equal(label[0, 0, 0, 3:7], [0, 0.25, 1, 0.75])


def test_fit_small_size_needs_batch_size_one(one_image):
    source, _ = one_image
    transform = "resize_param { resize_mode: FIT_SMALL_SIZE height: 3 width: 3 }"
    with pytest.raises(CaffeError, match="FIT_SMALL_SIZE needs batch_size 1"):
        layer(source, batch=2, transform=transform)
    data, _ = forward(layer(source, transform=transform))
    assert data.shape == (1, 3, 3, 4)   # 6 x 8: the smaller side becomes 3


def test_expansion_places_the_image_and_its_boxes(tmp_path):
    pixels = pattern((3, 6, 8), seed=2)
    pixels[pixels == 32] = 33
    source = write_db(tmp_path / "db", [anno_datum(pixels, BOXES)])
    backend.set_random_seed(5)
    transform = ("expand_param { prob: 1 max_expand_ratio: 3 } "
                 "resize_param { height: 18 width: 24 interp_mode: NEAREST }")
    made = layer(source, batch=4, transform=transform, phase=TRAIN)
    data, label = forward(made)
    for item in range(4):
        image = data[item, 0]
        inside = np.argwhere(image != 32)
        top, left = inside.min(axis=0)
        bottom, right = inside.max(axis=0) + 1
        canvas_h, canvas_w = 18, 24
        got = label[0, 0, label[0, 0, :, 0] == item][:, 3:7]
        for (_, _, x0, y0, x1, y1, _), box in zip(BOXES, got):
            # the image covers [left, right) x [top, bottom) of the (resized) canvas
            expected = [(left + x0 * (right - left)) / canvas_w,
                        (top + y0 * (bottom - top)) / canvas_h,
                        (left + x1 * (right - left)) / canvas_w,
                        (top + y1 * (bottom - top)) / canvas_h]
            # nearest-neighbour resizing moves the edges by up to one canvas pixel
            assert box == pytest.approx(expected, abs=1.01 / 18)


def test_batch_samplers_crop_and_keep_boxes_inside(tmp_path):
    records = [anno_datum(pattern((3, 20, 30), seed=s), BOXES) for s in range(3)]
    source = write_db(tmp_path / "db", records)
    anno = ("batch_sampler { max_sample: 1 max_trials: 1 } "
            "batch_sampler { sampler { min_scale: 0.3 max_scale: 1 min_aspect_ratio: 0.5 "
            "max_aspect_ratio: 2 } sample_constraint { min_jaccard_overlap: 0.5 } "
            "max_sample: 1 max_trials: 50 }")
    transform = "resize_param { height: 10 width: 10 } emit_constraint { }"

    def run(seed):
        backend.set_random_seed(seed)
        made = layer(source, batch=3, transform=transform, anno=anno, phase=TRAIN)
        return [forward(made) for _ in range(3)]

    first, again, other = run(11), run(11), run(12)
    for (data, label), (data2, label2) in zip(first, again):
        np.testing.assert_array_equal(data, data2)
        np.testing.assert_array_equal(label, label2)
    assert any(not np.array_equal(a[1], b[1]) for a, b in zip(first, other))
    for data, label in first:
        assert data.shape == (3, 3, 10, 10)
        boxes = label[0, 0]
        assert (boxes[:, 3:7] >= 0).all() and (boxes[:, 3:7] <= 1).all()
        assert (boxes[:, 5] > boxes[:, 3]).all() and (boxes[:, 6] > boxes[:, 4]).all()
        assert set(boxes[:, 1]) <= {1, 3}


def test_distortion_is_seeded_and_keeps_the_boxes(one_image):
    source, pixels = one_image
    transform = ("distort_param { brightness_prob: 1 brightness_delta: 32 contrast_prob: 1 "
                 "contrast_lower: 0.5 contrast_upper: 1.5 hue_prob: 1 hue_delta: 18 "
                 "saturation_prob: 1 saturation_lower: 0.5 saturation_upper: 1.5 "
                 "random_order_prob: 1 }")
    runs = []
    for _ in range(2):
        backend.set_random_seed(21)
        runs.append(forward(layer(source, batch=2, transform=transform, phase=TRAIN)))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    assert not np.array_equal(runs[0][0][0], pixels)
    np.testing.assert_array_equal(runs[0][1][0, 0, :3], rows(0, BOXES))


def test_encoded_records_decode(tmp_path):
    pixels = pattern()
    source = write_db(tmp_path / "db", [anno_datum(pixels, BOXES, encoded=True)])
    data, label = forward(layer(source, transform="crop_size: 4"))
    np.testing.assert_array_equal(data[0], pixels[:, 1:5, 2:6])
    assert label.shape == (1, 1, 3, 8)


def test_records_without_a_type_give_datum_labels(tmp_path):
    records = [anno_datum(pattern(seed=s), BOXES, label=5 + s, typed=False) for s in range(2)]
    source = write_db(tmp_path / "db", records)
    data, label = forward(layer(source, batch=2))
    np.testing.assert_array_equal(label, [5, 6])
    _, boxes = forward(layer(source, batch=2, anno="anno_type: BBOX"))
    assert boxes.shape == (1, 1, 6, 8)
    data, none = forward(layer(source, batch=2, tops=1))
    assert data.shape == (2, 3, 6, 8) and none is None


def test_images_of_different_sizes_need_a_resize(tmp_path):
    records = [anno_datum(pattern((3, 6, 8)), BOXES), anno_datum(pattern((3, 5, 8)), BOXES)]
    source = write_db(tmp_path / "db", records)
    made = layer(source, batch=2)
    with pytest.raises(CaffeError, match="set resize_param"):
        forward(made)
    data, _ = forward(layer(source, batch=2, transform="resize_param { height: 4 width: 4 }"))
    assert data.shape == (2, 3, 4, 4)


def test_user_errors(tmp_path, one_image):
    source, _ = one_image
    with pytest.raises(CaffeError, match='layer "data".*data_param source is not set'):
        layer("")
    with pytest.raises(CaffeError, match='layer "data"'):
        layer(str(tmp_path / "missing"))
    bad = tmp_path / "labelmap.prototxt"
    bad.write_text("item { name: 'a' label: 0 } item { nme: 'b' }")
    with pytest.raises(CaffeError, match="label_map_file.*labelmap.prototxt:1"):
        layer(source, anno=f'label_map_file: "{bad}"')
    with pytest.raises(CaffeError, match="label_map_file.*missing.prototxt"):
        layer(source, anno=f'label_map_file: "{tmp_path / "missing.prototxt"}"')
    good = tmp_path / "good.prototxt"
    good.write_text("item { name: 'none' label: 0 } item { name: 'a' label: 1 }")
    layer(source, anno=f'label_map_file: "{good}"')
    with pytest.raises(CaffeError, match="min_scale <= max_scale"):
        layer(source, anno="batch_sampler { sampler { min_scale: 0.9 max_scale: 0.5 } }")
    with pytest.raises(CaffeError, match="set both crop_h and crop_w"):
        layer(source, transform="crop_h: 4")
    with pytest.raises(CaffeError, match="max_expand_ratio must be greater than 1"):
        layer(source, transform="expand_param { max_expand_ratio: 1 }")
    layer(source, transform="noise_param { decolorize: true }")   # implemented: accepted


def test_rectangular_crop_h_crop_w(one_image):
    source, pixels = one_image
    data, label = forward(layer(source, transform="crop_h: 2 crop_w: 6"))
    np.testing.assert_array_equal(data[0], pixels[:, 2:4, 1:7])
    assert label.shape[-1] == 8


def test_other_layer_types_refuse_the_augmentation():
    text = ('name: "d" type: "Data" top: "data" data_param {{ source: "x" batch_size: 1 }} '
            "transform_param {{ {} }}")
    with pytest.raises(CaffeError, match="implements only in AnnotatedData layers, not in "
                                         "Data layers"):
        set_up(text.format("distort_param { brightness_prob: 1 }"), [], 1)
    image_data = ('name: "d" type: "ImageData" top: "data" image_data_param { source: "x" } '
                  "transform_param { resize_param { height: 3 width: 3 } }")
    with pytest.raises(CaffeError, match="implements only in AnnotatedData and Data layers, "
                                         "not in ImageData layers"):
        set_up(image_data, [], 1)


@pytest.mark.parametrize("encoded", [False, True])
def test_the_data_layer_resizes_and_crops_rectangles(tmp_path, encoded):
    """SSD's Data layer resizes (encoded) images and crops crop_h x crop_w, as AnnotatedData."""
    pixels = [pattern(seed=s) for s in range(3)]
    records = [anno_datum(p, [], label=4 + i, encoded=encoded).datum
               for i, p in enumerate(pixels)]
    source = write_db(tmp_path / "db", records)
    text = ('name: "data" type: "Data" top: "data" top: "label" data_param {{ source: "{}" '
            "batch_size: 3 backend: LMDB }} transform_param {{ crop_h: 6 crop_w: 4 "
            "resize_param {{ height: 12 width: 16 interp_mode: NEAREST }} }}").format(source)
    data, label = forward(set_up(text, [], 2, TEST))
    assert data.shape == (3, 3, 6, 4)
    np.testing.assert_array_equal(label, [4, 5, 6])
    for item, image in enumerate(pixels):
        doubled = image.repeat(2, axis=1).repeat(2, axis=2)     # 12 x 16, nearest
        np.testing.assert_array_equal(data[item], doubled[:, 3:9, 6:10])


def test_label_rows_change_with_the_batch_and_reach_the_device(tmp_path, engine):
    records = [anno_datum(pattern(seed=0), BOXES[:1]), anno_datum(pattern(seed=1), BOXES),
               anno_datum(pattern(seed=2), [])]
    source = write_db(tmp_path / "db", records)
    made = layer(source, batch=1)
    net_layer, bottom, top = made
    assert top[1].shape == (1, 1, 1, 8)
    for expected in (rows(0, BOXES[:1]), rows(0, BOXES), -np.ones((1, 8), F32),
                     rows(0, BOXES[:1])):
        net_layer.reshape(bottom, top)
        net_layer.forward(bottom, top)
        if engine == "gpu":
            assert top[1].data_memory.head is Head.AT_GPU
        np.testing.assert_array_equal(top[1].cpu_data[0, 0], expected)
    net_layer.close()


def test_exact_resume_repeats_the_random_crops(tmp_path):
    records = [anno_datum(pattern((3, 12, 16), seed=s), BOXES) for s in range(3)]
    source = write_db(tmp_path / "db", records)
    anno = ("batch_sampler { sampler { min_scale: 0.3 } max_sample: 1 max_trials: 20 }")
    backend.set_random_seed(9)
    made = layer(source, batch=2, transform="resize_param { height: 6 width: 6 } mirror: true",
                 anno=anno, phase=TRAIN)
    forward(made)
    state = made[0].get_state()
    expected = [forward(made) for _ in range(3)]
    made[0].set_state(state)
    for data, label in expected:
        again = forward(made)
        np.testing.assert_array_equal(again[0], data)
        np.testing.assert_array_equal(again[1], label)


@pytest.mark.parametrize("encoded", [False, True])
def test_mean_file(tmp_path, encoded):
    """A raw Datum's mean image is cropped with it (BVLC's way); a decoded image's is taken at
    the output's positions and must have the output's shape (the fork's cv::Mat path)."""
    pixels = pattern()
    source = write_db(tmp_path / "db", [anno_datum(pixels, BOXES, encoded=encoded)])
    mean = np.random.default_rng(5).uniform(0, 50, (3, 6, 8)).astype(F32)
    path = tmp_path / "mean.binaryproto"
    write_blob_proto(str(path), fill_blob_proto(caffe_pb2.BlobProto(), mean[None]))
    data, _ = forward(layer(source, transform=f'mean_file: "{path}"'))
    np.testing.assert_array_equal(data[0], pixels.astype(F32) - mean)
    cropped = layer(source, transform=f'mean_file: "{path}" crop_size: 4')
    if encoded:
        with pytest.raises(CaffeError, match="mean file's shape"):
            forward(cropped)
    else:
        np.testing.assert_array_equal(forward(cropped)[0][0],
                                      (pixels.astype(F32) - mean)[:, 1:5, 2:6])
