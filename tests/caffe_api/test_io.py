"""caffe.io: BlobProto/Datum conversions, Transformer, load_image, resize_image, oversample.

Resizing is checked against outputs of BVLC's scikit-image/scipy implementation
(tests/caffe_api/io_golden.py) and against small cases worked out by hand.
"""
import importlib.util
import io

import numpy as np
import pytest
from PIL import Image

from caffe import io as caffe_io
from caffe.proto import caffe_pb2
from tests.caffe_api.io_golden import (MEAN_GOLDEN, PREPROCESS_GOLDEN, RESIZE_CASES,
                                       RESIZE_GOLDEN, ramp)
from tests.numerics import close_to

HAVE_SCIPY = importlib.util.find_spec("scipy") is not None


# --- BlobProto ----------------------------------------------------------------------------
def test_blobproto_legacy_four_axes_win_over_shape():
    blob = caffe_pb2.BlobProto()
    blob.data.extend(np.arange(100.0))
    blob.num, blob.channels, blob.height, blob.width = 1, 1, 10, 10
    blob.shape.dim.extend([100])
    arr = caffe_io.blobproto_to_array(blob)
    assert arr.shape == (1, 1, 10, 10)
    assert arr.dtype == np.float32
    assert arr[0, 0, 3, 4] == 34.0


def test_blobproto_legacy_axes_left_unset_count_as_zero():
    blob = caffe_pb2.BlobProto()
    blob.data.extend([1.0] * 6)
    blob.height, blob.width = 2, 3
    with pytest.raises(ValueError, match=r"\(0, 0, 2, 3\)"):
        caffe_io.blobproto_to_array(blob)


def test_blobproto_shape_dims_and_diff():
    blob = caffe_pb2.BlobProto()
    blob.shape.dim.extend([2, 3])
    blob.data.extend(range(6))
    blob.diff.extend([0.5 * i for i in range(6)])
    np.testing.assert_array_equal(caffe_io.blobproto_to_array(blob), [[0, 1, 2], [3, 4, 5]])
    diff = caffe_io.blobproto_to_array(blob, return_diff=True)
    np.testing.assert_array_equal(diff, [[0, 0.5, 1], [1.5, 2, 2.5]])


def test_blobproto_without_shape_is_a_scalar():
    blob = caffe_pb2.BlobProto()
    blob.data.append(123.0)
    arr = caffe_io.blobproto_to_array(blob)
    assert arr.shape == () and arr == 123
    blob.data.extend([0.0] * 99)
    with pytest.raises(ValueError, match="100 data values"):
        caffe_io.blobproto_to_array(blob)


def test_blobproto_ignores_double_data():
    blob = caffe_pb2.BlobProto()
    blob.shape.dim.append(2)
    blob.data.extend([1.0, 2.0])
    blob.double_data.extend([7.0, 8.0])
    np.testing.assert_array_equal(caffe_io.blobproto_to_array(blob), [1.0, 2.0])


def test_array_to_blobproto_rounds_to_float32_and_keeps_shape():
    arr = np.array([[0.1, -2.5, 1e-3]])
    blob = caffe_io.array_to_blobproto(arr, diff=arr * 2)
    assert list(blob.shape.dim) == [1, 3]
    assert not blob.HasField("num")
    np.testing.assert_array_equal(blob.data, arr.astype(np.float32).ravel())
    np.testing.assert_array_equal(blob.diff, (arr * 2).astype(np.float32).ravel())
    back = caffe_io.blobproto_to_array(blob)
    np.testing.assert_array_equal(back, arr.astype(np.float32))


def test_array_to_blobproto_zero_axes_and_bad_diff():
    blob = caffe_io.array_to_blobproto(np.array(4.0))
    assert blob.HasField("shape") and len(blob.shape.dim) == 0
    assert caffe_io.blobproto_to_array(blob) == 4.0
    with pytest.raises(ValueError, match="diff has 2 values, data 3"):
        caffe_io.array_to_blobproto(np.zeros(3), diff=np.zeros(2))


def test_blobprotovector_round_trip():
    arrays = [np.arange(24.0).reshape(1, 2, 3, 4), np.array([5.0, -1.0])]
    serialized = caffe_io.arraylist_to_blobprotovector_str(arrays)
    assert isinstance(serialized, bytes)
    back = caffe_io.blobprotovector_str_to_arraylist(serialized)
    assert [a.shape for a in back] == [(1, 2, 3, 4), (2,)]
    for got, want in zip(back, arrays):
        np.testing.assert_array_equal(got, want)


# --- Datum --------------------------------------------------------------------------------
def test_uint8_array_goes_to_data_bytes():
    arr = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    datum = caffe_io.array_to_datum(arr, label=7)
    assert (datum.channels, datum.height, datum.width, datum.label) == (2, 3, 4, 7)
    assert datum.data == bytes(range(24)) and len(datum.float_data) == 0
    back = caffe_io.datum_to_array(datum)
    assert back.dtype == np.uint8 and back.flags.writeable
    np.testing.assert_array_equal(back, arr)


def test_float_array_goes_to_float_data():
    arr = np.array([[[0.1, 2.0]], [[-3.0, 4.5]]])
    datum = caffe_io.array_to_datum(arr)
    assert datum.data == b""
    np.testing.assert_array_equal(datum.float_data, arr.astype(np.float32).ravel())
    back = caffe_io.datum_to_array(datum)
    assert back.dtype == np.float64 and back.shape == (2, 1, 2)
    np.testing.assert_array_equal(back, arr.astype(np.float32))


def test_label_is_only_serialized_when_given():
    with_label = caffe_io.array_to_datum(np.ones((10, 10, 3)), label=1)
    without = caffe_io.array_to_datum(np.ones((10, 10, 3)))
    assert not without.HasField("label")
    assert len(with_label.SerializeToString()) > len(without.SerializeToString())


def test_datum_shape_errors():
    with pytest.raises(ValueError, match=r"\(10, 10\)"):
        caffe_io.array_to_datum(np.ones((10, 10)))
    datum = caffe_pb2.Datum(channels=1, height=2, width=2, data=b"abc")
    with pytest.raises(ValueError, match="holds 3 values"):
        caffe_io.datum_to_array(datum)


def test_encoded_datum_is_decoded_to_bgr():
    rgb = np.array([[[255, 0, 0], [0, 255, 0]]], dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="PNG")
    datum = caffe_pb2.Datum(data=buffer.getvalue(), encoded=True)
    bgr = rgb[:, :, ::-1].transpose(2, 0, 1)
    np.testing.assert_array_equal(caffe_io.datum_to_array(datum), bgr)


# --- Transformer --------------------------------------------------------------------------
def imagenet_style_transformer(shape=(1, 3, 2, 2)):
    transformer = caffe_io.Transformer({"data": shape})
    transformer.set_transpose("data", (2, 0, 1))
    transformer.set_channel_swap("data", (2, 1, 0))
    transformer.set_raw_scale("data", 255)
    transformer.set_mean("data", np.array([100.0, 110.0, 120.0]))
    transformer.set_input_scale("data", 0.5)
    return transformer


def test_preprocess_applies_each_step_in_bvlc_order():
    image = np.array([[[0.0, 0.5, 1.0], [0.2, 0.4, 0.6]],
                      [[1.0, 1.0, 1.0], [0.1, 0.3, 0.9]]], dtype=np.float32)  # H=2 W=2 RGB
    got = imagenet_style_transformer().preprocess("data", image)
    # transpose to KHW, reverse the channels, x255, minus the (channel-swapped) mean, x0.5
    bgr = image.transpose(2, 0, 1)[::-1] * 255
    want = (bgr - np.array([100.0, 110.0, 120.0])[:, None, None]) * 0.5
    assert got.dtype == np.float32 and got.shape == (3, 2, 2)
    close_to(got, want, rtol=1e-6)
    assert got[0, 0, 0] == pytest.approx((1.0 * 255 - 100) * 0.5)


def test_preprocess_leaves_the_callers_array_alone_and_deprocess_inverts_it():
    image = np.linspace(0, 1, 12, dtype=np.float32).reshape(2, 2, 3)
    kept = image.copy()
    transformer = imagenet_style_transformer()
    blob = transformer.preprocess("data", image)
    np.testing.assert_array_equal(image, kept)
    np.testing.assert_allclose(transformer.deprocess("data", blob[np.newaxis]), image, atol=1e-6)


def test_preprocess_resizes_to_the_input_and_resizes_a_mean_of_another_size():
    transformer = caffe_io.Transformer({"data": (1, 3, 3, 2)})
    transformer.set_transpose("data", (2, 0, 1))
    transformer.set_channel_swap("data", (2, 1, 0))
    transformer.set_raw_scale("data", 255.0)
    transformer.set_mean("data", ramp((3, 4, 4), np.float64, 120, 60))
    transformer.set_input_scale("data", 0.5)
    mean = transformer.mean["data"]
    assert mean.shape == (3, 3, 2)
    np.testing.assert_allclose(mean.ravel(), MEAN_GOLDEN, rtol=1e-12)
    got = transformer.preprocess("data", ramp((5, 5, 3), np.float32))
    np.testing.assert_allclose(got.ravel(), np.float32(PREPROCESS_GOLDEN), rtol=0, atol=1e-5)


def test_set_mean_shapes():
    transformer = caffe_io.Transformer({"data": (1, 3, 4, 5)})
    transformer.set_mean("data", np.array([1.0, 2.0, 3.0]))
    assert transformer.mean["data"].shape == (3, 1, 1)
    per_pixel = np.arange(60.0).reshape(3, 4, 5)
    transformer.set_mean("data", per_pixel)
    assert transformer.mean["data"] is per_pixel
    transformer.set_mean("data", np.full((8, 10), 7.0))  # a constant mean stays constant
    np.testing.assert_array_equal(transformer.mean["data"], np.full((1, 4, 5), 7.0))


@pytest.mark.parametrize("mean, message", [
    (np.zeros(4), "mean of 4 channels for input 'data' of 3 channels"),
    (np.zeros((1, 3, 4, 5)), r"mean of shape \(1, 3, 4, 5\) for input 'data'"),
    (np.zeros((2, 6, 6)), "the channels differ"),
])
def test_set_mean_errors_name_the_input(mean, message):
    transformer = caffe_io.Transformer({"data": (1, 3, 4, 5)})
    with pytest.raises(ValueError, match=message):
        transformer.set_mean("data", mean)


def test_setter_errors_name_the_input():
    transformer = caffe_io.Transformer({"data": (1, 3, 4, 5)})
    with pytest.raises(ValueError, match="'label' is not one of the net inputs: \\['data'\\]"):
        transformer.set_raw_scale("label", 255)
    with pytest.raises(ValueError, match="'label' is not one of the net inputs"):
        transformer.preprocess("label", np.zeros((4, 5, 3)))
    with pytest.raises(ValueError, match=r"transpose order \(1, 0\) for input 'data' needs 3"):
        transformer.set_transpose("data", (1, 0))
    with pytest.raises(ValueError, match="channel swap .* for input 'data' needs 3 channels"):
        transformer.set_channel_swap("data", (1, 0))


def test_preprocess_error_names_the_input():
    transformer = caffe_io.Transformer({"data": (1, 3, 4, 5)})
    transformer.set_mean("data", np.zeros(3))  # but no transpose: HWK minus (K, 1, 1)
    with pytest.raises(ValueError, match="preprocessing input 'data'"):
        transformer.preprocess("data", np.zeros((4, 5, 3)))


# --- load_image ---------------------------------------------------------------------------
RGB = np.array([[[255, 0, 0], [0, 255, 0], [0, 0, 255]],
                [[10, 20, 30], [128, 64, 32], [255, 255, 255]]], dtype=np.uint8)
LUMA = np.array([0.2125, 0.7154, 0.0721])


def save(tmp_path, name, array, mode=None):
    path = tmp_path / name
    image = Image.fromarray(array)
    (image.convert(mode) if mode else image).save(path)
    return str(path)


def test_color_image_as_rgb_and_as_gray(tmp_path):
    path = save(tmp_path, "rgb.png", RGB)
    rgb = caffe_io.load_image(path)
    assert rgb.dtype == np.float32 and rgb.shape == (2, 3, 3)
    np.testing.assert_array_equal(rgb, (RGB * (1.0 / 255)).astype(np.float32))
    gray = caffe_io.load_image(path, color=False)
    assert gray.shape == (2, 3, 1)
    np.testing.assert_allclose(gray[:, :, 0], RGB / 255.0 @ LUMA, rtol=1e-6)
    assert gray[0, 0, 0] == pytest.approx(0.2125)


def test_gray_image_is_repeated_for_color(tmp_path):
    path = save(tmp_path, "gray.png", RGB[:, :, 1])
    np.testing.assert_array_equal(caffe_io.load_image(path, color=False)[:, :, 0],
                                  np.float32(RGB[:, :, 1] / 255.0))
    rgb = caffe_io.load_image(path)
    assert rgb.shape == (2, 3, 3)
    for channel in range(3):
        np.testing.assert_array_equal(rgb[:, :, channel], np.float32(RGB[:, :, 1] / 255.0))


def test_alpha_is_dropped_for_color_and_blended_over_white_for_gray(tmp_path):
    alpha = np.array([[255, 0, 128], [64, 255, 0]], dtype=np.uint8)
    path = save(tmp_path, "rgba.png", np.dstack([RGB, alpha]))
    np.testing.assert_array_equal(caffe_io.load_image(path), np.float32(RGB / 255.0))
    a = alpha[:, :, None] / 255.0
    blended = (1 - a) + a * RGB / 255.0
    np.testing.assert_allclose(caffe_io.load_image(path, color=False)[:, :, 0],
                               blended @ LUMA, rtol=1e-6)
    assert caffe_io.load_image(path, color=False)[0, 1, 0] == 1.0  # transparent: white


def test_sixteen_bit_palette_and_bilevel_images(tmp_path):
    deep = np.array([[0, 1000, 65535]], dtype=np.uint16)
    path = save(tmp_path, "deep.png", deep)
    np.testing.assert_allclose(caffe_io.load_image(path, color=False)[0, :, 0],
                               [0, 1000 / 65535, 1], rtol=1e-7)
    indexed = Image.frombytes("P", (3, 2), bytes(range(6)))
    indexed.putpalette(RGB.tobytes())
    indexed.save(tmp_path / "palette.png")
    palette = caffe_io.load_image(str(tmp_path / "palette.png"))
    np.testing.assert_array_equal(palette, np.float32(RGB / 255.0))
    bilevel = caffe_io.load_image(save(tmp_path, "bw.png", RGB[:, :, 2], mode="1"), False)
    np.testing.assert_array_equal(bilevel[:, :, 0], [[0, 0, 1], [0, 0, 1]])


def test_file_objects_and_path_objects(tmp_path):
    path = save(tmp_path, "rgb.bmp", RGB)
    with open(path, "rb") as handle:
        np.testing.assert_array_equal(caffe_io.load_image(handle), np.float32(RGB / 255.0))
    np.testing.assert_array_equal(caffe_io.load_image(tmp_path / "rgb.bmp"),
                                  np.float32(RGB / 255.0))


def test_missing_and_broken_files_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.png"):
        caffe_io.load_image(str(tmp_path / "nothing.png"))
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image at all")
    with pytest.raises(OSError, match="cannot read image file .*broken.jpg"):
        caffe_io.load_image(str(broken))
    truncated = tmp_path / "truncated.png"
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    with open(save(tmp_path, "whole.png", noise), "rb") as handle:
        truncated.write_bytes(handle.read()[:5000])
    with pytest.raises(OSError, match="truncated.png"):
        caffe_io.load_image(str(truncated))


# --- resize_image -------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(RESIZE_CASES))
def test_resize_matches_bvlc_on_scikit_image(name):
    image, new_dims, order = RESIZE_CASES[name]
    got = caffe_io.resize_image(image, new_dims, interp_order=order)
    assert got.dtype == np.float32
    assert got.shape == new_dims + image.shape[2:]
    np.testing.assert_allclose(got.ravel(), np.float32(RESIZE_GOLDEN[name]), rtol=0, atol=1e-6)


def test_linear_upscale_by_hand_shows_the_constant_border():
    # [2, 6] -> 4 samples at source x = -0.25, 0.25, 0.75, 1.25; the border reads 0 after
    # scaling to [0, 1] (so [0, 1] gives [0, .25, .75, .75]), then back to [2, 6].
    got = caffe_io.resize_image(np.array([[[2.0], [6.0]]]), (1, 4))
    np.testing.assert_allclose(got[0, :, 0], [2.0, 3.0, 5.0, 5.0], rtol=1e-6)


def test_nearest_upscale_by_hand():
    got = caffe_io.resize_image(np.array([[[1.0], [3.0]]]), (1, 4), interp_order=0)
    np.testing.assert_array_equal(got[0, :, 0], [1.0, 1.0, 3.0, 3.0])


def test_other_channel_counts_zoom_with_end_points_aligned():
    # scipy.ndimage.zoom without grid mode: the 3 outputs sit at source x = 0, 0.5, 1.
    image = np.array([[[0.0, 10.0], [4.0, 30.0]]])
    got = caffe_io.resize_image(image, (1, 3))
    np.testing.assert_allclose(got[0], [[0.0, 10.0], [2.0, 20.0], [4.0, 30.0]], rtol=1e-6)


def test_constant_image_is_filled_with_its_value():
    got = caffe_io.resize_image(np.full((4, 6, 3), 0.3), (7, 2))
    assert got.shape == (7, 2, 3) and got.dtype == np.float32
    np.testing.assert_array_equal(got, np.float32(0.3))


def test_interpolation_order_errors():
    with pytest.raises(ValueError, match="interp_order must be an integer from 0 to 5, got 6"):
        caffe_io.resize_image(ramp((4, 4, 3), np.float32), (2, 2), interp_order=6)


@pytest.mark.skipif(HAVE_SCIPY, reason="with scipy installed, orders 2-5 go to scipy")
def test_cubic_without_scipy_says_what_it_needs():
    with pytest.raises(NotImplementedError, match="interp_order=3 needs scipy"):
        caffe_io.resize_image(ramp((4, 4, 3), np.float32), (2, 2), interp_order=3)


# --- oversample ---------------------------------------------------------------------------
def test_oversample_takes_corners_centre_and_their_mirrors():
    first = np.arange(20.0).reshape(4, 5, 1)
    images = [first, first + 100]
    crops = caffe_io.oversample(images, (2, 3))
    assert crops.shape == (20, 2, 3, 1) and crops.dtype == np.float32
    # top-left, top-right, bottom-left, bottom-right, centre (rows 1-2, cols 1-3)
    origins = [(0, 0), (0, 2), (2, 0), (2, 2), (1, 1)]
    for number, image in enumerate(images):
        for index, (top, left) in enumerate(origins):
            window = image[top:top + 2, left:left + 3]
            np.testing.assert_array_equal(crops[10 * number + index], window)
            np.testing.assert_array_equal(crops[10 * number + 5 + index], window[:, ::-1])


def test_oversample_centre_of_odd_margins_rounds_down():
    image = np.arange(25.0).reshape(5, 5, 1)
    centre = caffe_io.oversample([image], (2, 2))[4]
    np.testing.assert_array_equal(centre[:, :, 0], [[6, 7], [11, 12]])


def test_oversample_crop_larger_than_image():
    with pytest.raises(ValueError, match="crop of 5x2 is larger than the 4x4 images"):
        caffe_io.oversample([np.zeros((4, 4, 3))], (5, 2))
