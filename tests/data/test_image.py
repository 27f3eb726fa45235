"""Image decoding and resizing give OpenCV's numbers (golden values from OpenCV 4.10)."""
import io

import numpy as np
import pytest
from PIL import Image

from pycaffe_cli.data.image import decode_image, read_image, resize_linear
from pycaffe_cli.errors import CaffeError


def pattern():
    """(5, 7, 3) HWC test image: no two neighbours alike, some wrap-around jumps."""
    i, j, c = np.meshgrid(np.arange(5), np.arange(7), np.arange(3), indexing="ij")
    return ((i * 37 + j * 11 + c * 53 + i * j * 5) % 256).astype(np.uint8)


# cv2.resize(pattern(), (4, 3), interpolation=cv2.INTER_LINEAR), as (C, H, W).
CV_DOWN = [[[17, 39, 61, 83], [82, 119, 155, 192], [147, 198, 100, 76]],
           [[70, 92, 114, 137], [135, 172, 208, 245], [199, 80, 57, 98]],
           [[123, 145, 167, 189], [188, 225, 37, 42], [189, 48, 99, 151]]]
# cv2.resize(pattern()[:, :, 1], (11, 8), interpolation=cv2.INTER_LINEAR).
CV_UP = [[53, 58, 65, 72, 79, 86, 93, 100, 107, 114, 119],
         [69, 75, 84, 92, 100, 109, 117, 126, 134, 142, 148],
         [92, 100, 110, 120, 131, 141, 151, 162, 172, 183, 190],
         [115, 124, 137, 149, 161, 174, 186, 198, 211, 223, 232],
         [139, 149, 163, 177, 192, 206, 170, 155, 169, 184, 194],
         [162, 173, 190, 206, 222, 239, 102, 31, 48, 64, 76],
         [185, 198, 203, 130, 109, 127, 74, 52, 70, 89, 102],
         [201, 215, 211, 68, 18, 38, 58, 77, 97, 117, 131]]


def chw(hwc):
    return np.ascontiguousarray(hwc.transpose(2, 0, 1))


def test_resize_matches_opencv_downscale():
    np.testing.assert_array_equal(resize_linear(chw(pattern()), 3, 4), CV_DOWN)


def test_resize_matches_opencv_upscale():
    np.testing.assert_array_equal(resize_linear(chw(pattern()[:, :, 1:2]), 8, 11)[0], CV_UP)


def test_resize_exact_half_is_2x2_average():
    src = np.random.default_rng(0).integers(0, 256, (2, 6, 8), dtype=np.uint8)
    blocks = src.reshape(2, 3, 2, 4, 2).astype(np.int64).sum(axis=(2, 4))
    np.testing.assert_array_equal(resize_linear(src, 3, 4), (blocks + 2) >> 2)


def linear_reference(src, height, width):
    """cv::resize(INTER_LINEAR) for uint8, one output value at a time from OpenCV's tables:
    each output pixel's two horizontal sums (11-bit weights), then the vertical pass's
    16-bit products."""
    from pycaffe_cli.data.image import _axis_table
    channels, src_h, src_w = src.shape
    xofs, alpha0, alpha1 = _axis_table(src_w, width, clamp=True)
    yofs, beta0, beta1 = _axis_table(src_h, height, clamp=False)
    out = np.empty((channels, height, width), np.int64)
    plane = src.astype(np.int64)
    for y in range(height):
        r0, r1 = min(max(yofs[y], 0), src_h - 1), min(max(yofs[y] + 1, 0), src_h - 1)
        for x in range(width):
            x0, x1 = xofs[x], min(xofs[x] + 1, src_w - 1)
            s0 = plane[:, r0, x0] * alpha0[x] + plane[:, r0, x1] * alpha1[x]
            s1 = plane[:, r1, x0] * alpha0[x] + plane[:, r1, x1] * alpha1[x]
            out[:, y, x] = ((((s0 >> 4) * beta0[y]) >> 16) + (((s1 >> 4) * beta1[y]) >> 16)
                            + 2) >> 2
    return out.clip(0, 255)


def test_resize_computes_each_value_from_opencvs_tables():
    # Shrinking and growing by various factors, rows reused or skipped by the row buffers.
    rng = np.random.default_rng(7)
    for src_h, src_w, height, width in [(9, 13, 5, 7), (5, 4, 17, 11), (20, 3, 7, 9),
                                        (1, 6, 4, 2), (7, 7, 1, 1), (12, 30, 12, 10),
                                        (31, 17, 8, 40)]:
        src = rng.integers(0, 256, (3, src_h, src_w), dtype=np.uint8)
        np.testing.assert_array_equal(resize_linear(src, height, width),
                                      linear_reference(src, height, width))


def test_resize_same_size_is_identity():
    src = chw(pattern())
    assert resize_linear(src, 5, 7) is src


def encode(array, fmt, **options):
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, fmt, **options)
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
