"""Image decoding gives OpenCV's numbers."""
import io

import numpy as np
import pytest
from PIL import Image

from pycaffe_cli.data.image import decode_image, read_image
from pycaffe_cli.data.linear_resize import resize_linear
from pycaffe_cli.errors import CaffeError


def pattern():
    """(5, 7, 3) HWC test image: no two neighbours alike, some wrap-around jumps."""
    i, j, c = np.meshgrid(np.arange(5), np.arange(7), np.arange(3), indexing="ij")
    return ((i * 37 + j * 11 + c * 53 + i * j * 5) % 256).astype(np.uint8)


def chw(hwc):
    return np.ascontiguousarray(hwc.transpose(2, 0, 1))


def encode(array, fmt, **options):
    """The bytes of ``array`` (or of a Pillow image) saved as ``fmt``."""
    picture = array if isinstance(array, Image.Image) else Image.fromarray(array)
    buffer = io.BytesIO()
    picture.save(buffer, fmt, **options)
    return buffer.getvalue()


def test_decode_colour_is_bgr_channel_first():
    rgb = pattern()
    data = encode(rgb, "PNG")
    np.testing.assert_array_equal(decode_image(data, True), chw(rgb[:, :, ::-1]))
    np.testing.assert_array_equal(decode_image(data, None), chw(rgb[:, :, ::-1]))


def test_decode_gray_png_uses_libpng_weights():
    rgb = pattern().astype(np.int64)
    expected = (9797 * rgb[..., 0] + 19234 * rgb[..., 1] + 3737 * rgb[..., 2]) >> 15
    gray = decode_image(encode(pattern(), "PNG"), False)
    assert gray.shape == (1, 5, 7)
    np.testing.assert_array_equal(gray[0], expected)


def test_decode_gray_bmp_uses_cvtcolor_weights():
    rgb = pattern().astype(np.int64)
    expected = (4899 * rgb[..., 0] + 9617 * rgb[..., 1] + 1868 * rgb[..., 2] + 8192) >> 14
    np.testing.assert_array_equal(decode_image(encode(pattern(), "BMP"), False)[0], expected)


def test_decode_gray_jpeg_is_the_luma_plane():
    data = encode(pattern(), "JPEG", quality=95)
    luma = Image.open(io.BytesIO(data))
    luma.draft("L", luma.size)
    np.testing.assert_array_equal(decode_image(data, False)[0], np.asarray(luma))


def test_decode_gray_image_native_and_forced_colour():
    gray = pattern()[:, :, 0]
    data = encode(gray, "PNG")
    np.testing.assert_array_equal(decode_image(data, None), gray[None])
    np.testing.assert_array_equal(decode_image(data, True), np.repeat(gray[None], 3, axis=0))


def test_decode_drops_alpha():
    rgba = np.concatenate([pattern(), np.full((5, 7, 1), 9, np.uint8)], axis=2)
    np.testing.assert_array_equal(decode_image(encode(rgba, "PNG"), True),
                                  chw(pattern()[:, :, ::-1]))


def test_decode_garbage_is_a_caffe_error():
    with pytest.raises(CaffeError, match="could not decode thing"):
        decode_image(b"not an image", True, "thing")


def test_read_image_resizes_and_reports_missing_files(tmp_path):
    path = tmp_path / "a.png"
    Image.fromarray(pattern()).save(path)
    np.testing.assert_array_equal(read_image(str(path), 3, 4, True),
                                  resize_linear(chw(pattern()[:, :, ::-1]), 3, 4))
    with pytest.raises(CaffeError, match="nope.png"):
        read_image(str(tmp_path / "nope.png"))


def with_orientation(array, fmt, orientation):
    """``array`` encoded as ``fmt`` with an EXIF orientation tag (274)."""
    exif = Image.Exif()
    exif[274] = orientation
    return encode(array, fmt, exif=exif.tobytes())


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_decode_applies_exif_orientation(fmt):
    # Orientation 6: the stored pixels are to be turned 90 degrees clockwise for display,
    # as cv::imdecode does (IMREAD_COLOR without IMREAD_IGNORE_ORIENTATION). Each file is
    # compared with its own stored pixels (Pillow's, unturned).
    rgb = np.kron(pattern(), np.ones((8, 8, 1), np.uint8))
    for orientation, turns in ((6, -1), (8, 1), (3, 2), (1, 0)):
        data = with_orientation(rgb, fmt, orientation)
        stored = chw(np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))[:, :, ::-1])
        np.testing.assert_array_equal(decode_image(data, True),
                                      np.rot90(stored, k=turns, axes=(1, 2)))
    untagged = encode(rgb, fmt)
    stored = chw(np.asarray(Image.open(io.BytesIO(untagged)).convert("RGB"))[:, :, ::-1])
    np.testing.assert_array_equal(decode_image(untagged, True), stored)
