"""DataTransformer: crop / mirror / mean / scale against a numpy reference, datum decoding."""
import io

import numpy as np
import pytest
from google.protobuf import text_format
from PIL import Image

from pycaffe_cli.data.transformer import DataTransformer, parse_datum, stage_images
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.blob_proto import fill_blob_proto
from pycaffe_cli.io.prototxt import write_blob_proto
from pycaffe_cli.proto import caffe_pb2

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST


def transformer(text, phase=TEST):
    param = text_format.Parse(text, caffe_pb2.TransformationParameter())
    return DataTransformer(param, phase, "tr")


def clone(rng):
    copy = np.random.default_rng()
    copy.bit_generator.state = rng.bit_generator.state
    return copy


def reference(src, h_off, w_off, mirror, crop, mean, scale):
    """Caffe's per-image loop, in numpy."""
    out = []
    for i in range(src.shape[0]):
        height = crop or src.shape[2]
        width = crop or src.shape[3]
        rows = slice(h_off[i], h_off[i] + height)
        cols = slice(w_off[i], w_off[i] + width)
        pixels = src[i, :, rows, cols].astype(np.float32)
        if mean is not None and mean.ndim == 3 and mean.shape[1] > 1:
            pixels = pixels - mean[:, rows, cols]
        elif mean is not None:
            pixels = pixels - mean.reshape(-1, 1, 1)
        pixels = pixels * np.float32(scale)
        out.append(pixels[:, :, ::-1] if mirror[i] else pixels)
    return np.stack(out)


def write_mean(path, mean):
    write_blob_proto(str(path), fill_blob_proto(caffe_pb2.BlobProto(), mean[None]))


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("phase", [TRAIN, TEST])
@pytest.mark.parametrize("crop", [0, 3])
@pytest.mark.parametrize("mirror", [False, True])
@pytest.mark.parametrize("mean_kind", ["none", "value", "values", "file"])
def test_batch_matches_reference(tmp_path, dtype, phase, crop, mirror, mean_kind):
    data_rng = np.random.default_rng(3)
    src = data_rng.integers(0, 256, (6, 2, 5, 6)).astype(dtype)
    if dtype == np.float32:
        src += np.float32(0.25)
    text = f"scale: 0.0078125 crop_size: {crop} mirror: {str(mirror).lower()}"
    mean = None
    if mean_kind == "value":
        text, mean = text + " mean_value: 127.5", np.float32([127.5, 127.5])
    elif mean_kind == "values":
        text, mean = text + " mean_value: 100 mean_value: 30.25", np.float32([100, 30.25])
    elif mean_kind == "file":
        mean = data_rng.uniform(0, 255, (2, 5, 6)).astype(np.float32)
        write_mean(tmp_path / "mean.binaryproto", mean)
        text += f' mean_file: "{tmp_path / "mean.binaryproto"}"'
    tr = transformer(text, phase)
    rng = np.random.default_rng(11)
    h_off, w_off, flips = tr.draw(np.tile([5, 6], (6, 1)), clone(rng))
    out = np.empty((6, 2, crop or 5, crop or 6), np.float32)
    tr.transform_batch(src, out, rng=rng)
    np.testing.assert_array_equal(out, reference(src, h_off, w_off, flips, crop, mean,
                                                 0.0078125))
    if crop and phase == TEST:
        assert set(h_off) == {1} and set(w_off) == {1}  # centred: (5-3)//2, (6-3)//2
    if crop and phase == TRAIN:
        assert 0 <= h_off.min() and h_off.max() <= 2 and 0 <= w_off.min() and w_off.max() <= 3
    assert flips.any() == mirror  # 6 fair coins: all equal with probability 1/32 (fixed seed)


def test_random_draws_are_spread_and_repeatable():
    tr = transformer("crop_size: 2 mirror: true", TRAIN)
    first = tr.draw(np.tile([10, 12], (400, 1)), np.random.default_rng(5))
    again = tr.draw(np.tile([10, 12], (400, 1)), np.random.default_rng(5))
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    h_off, w_off, flips = first
    assert set(h_off) == set(range(9)) and set(w_off) == set(range(11))
    assert 150 < flips.sum() < 250


def test_needs_rand_follows_caffe():
    assert not transformer("crop_size: 3", TEST).needs_rand
    assert transformer("crop_size: 3", TRAIN).needs_rand
    assert transformer("mirror: true", TEST).needs_rand  # Caffe mirrors in TEST too
    assert not transformer("scale: 2", TRAIN).needs_rand


def test_images_of_different_sizes_crop_each_on_its_own():
    tr = transformer("crop_size: 2", TEST)
    images = [np.arange(n * m, dtype=np.uint8).reshape(1, n, m) for n, m in ((4, 4), (3, 5))]
    src, sizes = stage_images(images)
    assert src.shape == (2, 1, 4, 5)
    np.testing.assert_array_equal(sizes, [[4, 4], [3, 5]])
    out = np.empty((2, 1, 2, 2), np.float32)
    tr.transform_batch(src, out, sizes)
    np.testing.assert_array_equal(out[0, 0], images[0][0, 1:3, 1:3])
    np.testing.assert_array_equal(out[1, 0], images[1][0, 0:2, 1:3])


def test_same_size_images_stage_without_sizes():
    images = [np.full((1, 2, 3), i, np.uint8) for i in range(3)]
    src, sizes = stage_images(images)
    assert sizes is None and src.dtype == np.uint8
    np.testing.assert_array_equal(src[:, 0, 0, 0], [0, 1, 2])


def test_different_sizes_without_crop_is_an_error():
    tr = transformer("scale: 1")
    src, sizes = stage_images([np.zeros((1, 2, 2), np.uint8), np.zeros((1, 3, 2), np.uint8)])
    with pytest.raises(CaffeError, match="differ in size"):
        tr.transform_batch(src, np.empty((2, 1, 2, 2), np.float32), sizes)


# --- Datums ---------------------------------------------------------------------------------
def png_bytes(rgb):
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, "PNG")
    return buffer.getvalue()


def test_datum_to_array_raw_float_and_encoded():
    tr = transformer("scale: 1")
    pixels = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    raw = caffe_pb2.Datum(channels=2, height=3, width=4, data=pixels.tobytes())
    np.testing.assert_array_equal(tr.datum_to_array(raw), pixels)
    floats = caffe_pb2.Datum(channels=2, height=3, width=4, float_data=pixels.ravel() / 7.0)
    got = tr.datum_to_array(floats)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, (pixels / 7.0).astype(np.float32))
    rgb = np.random.default_rng(0).integers(0, 256, (3, 4, 3), dtype=np.uint8)
    encoded = caffe_pb2.Datum(data=png_bytes(rgb), encoded=True)
    np.testing.assert_array_equal(tr.datum_to_array(encoded), rgb[:, :, ::-1].transpose(2, 0, 1))
    gray = transformer("force_gray: true").datum_to_array(encoded)
    assert gray.shape == (1, 3, 4)
    assert transformer("crop_size: 2").infer_shape(encoded) == (1, 3, 2, 2)
    assert tr.infer_shape(raw) == (1, 2, 3, 4)


def test_datum_with_wrong_byte_count_is_an_error():
    datum = caffe_pb2.Datum(channels=1, height=2, width=2, data=b"abc")
    with pytest.raises(CaffeError, match="3 bytes of data but its shape"):
        transformer("scale: 1").datum_to_array(datum)


def test_parse_datum_rejects_garbage():
    with pytest.raises(CaffeError, match="not a valid Datum"):
        parse_datum(b"\xff\xff\xff")


# --- parameter errors ------------------------------------------------------------------------
def test_mean_file_and_mean_value_together_is_an_error(tmp_path):
    write_mean(tmp_path / "m.binaryproto", np.zeros((1, 2, 2), np.float32))
    with pytest.raises(CaffeError, match='"tr".*mean_file and mean_value'):
        transformer(f'mean_file: "{tmp_path / "m.binaryproto"}" mean_value: 1')


def test_bad_mean_value_count_is_an_error():
    tr = transformer("mean_value: 1 mean_value: 2")
    with pytest.raises(CaffeError, match="either 1 mean_value or as many as channels: 3"):
        tr.transform_batch(np.zeros((1, 3, 2, 2), np.uint8), np.empty((1, 3, 2, 2), np.float32))


def test_mean_file_shape_must_match(tmp_path):
    write_mean(tmp_path / "m.binaryproto", np.zeros((1, 2, 2), np.float32))
    tr = transformer(f'mean_file: "{tmp_path / "m.binaryproto"}"')
    with pytest.raises(CaffeError, match="mean file's shape"):
        tr.output_shape((1, 3, 3))


def test_missing_mean_file_is_an_error(tmp_path):
    with pytest.raises(CaffeError, match="nothere.binaryproto"):
        transformer(f'mean_file: "{tmp_path / "nothere.binaryproto"}"')


def test_crop_larger_than_image_is_an_error():
    with pytest.raises(CaffeError, match="crop_size 5 is larger"):
        transformer("crop_size: 5").output_shape((1, 4, 6))


def test_force_color_and_gray_together_is_an_error():
    with pytest.raises(CaffeError, match="force_color and force_gray"):
        transformer("force_color: true force_gray: true")
