"""transform_param.noise_param in AnnotatedData (and SSD's Data): applied after the resize,
before the crop, to raw and encoded records alike, seeded, boxes untouched."""
import numpy as np

from pycaffe_cli import backend
from pycaffe_cli.data.noise import posterize
from pycaffe_cli.io.foreign import IMPLEMENTED_BY
from pycaffe_cli.proto import caffe_pb2
from tests.layer_helpers import set_up
from tests.layers.test_annotated_data import (BOXES, anno_datum, forward, layer, pattern, rows,
                                              write_db)


def test_noise_keeps_boxes_and_matches_the_operations(tmp_path):
    pixels = pattern((3, 6, 8), seed=4)
    records = [anno_datum(pixels, BOXES), anno_datum(pixels, BOXES, encoded=True)]
    source = write_db(tmp_path / "db", records)
    data, label = forward(layer(source, batch=2, transform="noise_param { prob: 0 "
                                "posterize: true inverse: true }"))
    # prob is not read (as in the fork); posterize comes before inverse
    expected = 255 - posterize(pixels.transpose(1, 2, 0)).transpose(2, 0, 1)
    np.testing.assert_array_equal(data[0], expected)
    np.testing.assert_array_equal(data[1], expected)
    np.testing.assert_array_equal(label[0, 0], np.concatenate([rows(0, BOXES), rows(1, BOXES)]))

    # after the resize, before the crop: a 4 x 4 centre crop of the noised 10 x 12 image,
    # the boxes as without noise
    geometry = ("resize_param { height: 10 width: 12 resize_mode: WARP interp_mode: NEAREST } "
                "crop_size: 4 ")
    noisy = geometry + ("noise_param { saltpepper: true saltpepper_param { fraction: 0.5 "
                        "value: 255 value: 0 value: 255 } }")
    runs = []
    for transform in (noisy, noisy, geometry):
        backend.set_random_seed(7)
        runs.append(forward(layer(source, batch=2, transform=transform)))
    (data, label), (again, _), (clean, clean_label) = runs
    np.testing.assert_array_equal(data, again)
    assert data.shape == clean.shape == (2, 3, 4, 4)
    np.testing.assert_array_equal(label, clean_label)
    marked = (data == np.array([255, 0, 255]).reshape(3, 1, 1)).all(axis=1)
    changed = (data != clean).any(axis=1)
    assert changed.any() and (marked | ~changed).all()


def test_data_layer_applies_noise(tmp_path):
    assert "Data" in IMPLEMENTED_BY[("TransformationParameter", "noise_param")]
    pixels = pattern((3, 5, 7), seed=9)
    datum = caffe_pb2.Datum(channels=3, height=5, width=7, label=2, data=pixels.tobytes())
    source = write_db(tmp_path / "db", [datum])
    text = (f'name: "data" type: "Data" top: "data" top: "label" data_param {{ source: '
            f'"{source}" batch_size: 1 backend: LMDB }} transform_param {{ noise_param {{ '
            f"inverse: true }} }}")
    data, label = forward(set_up(text, [], 2, caffe_pb2.TEST))
    np.testing.assert_array_equal(data[0], 255 - pixels.astype(np.float32))
    np.testing.assert_array_equal(label, [2])
