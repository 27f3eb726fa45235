"""Plain JPEGs decoded straight into numpy give the pixels of Pillow's general path (the same
libjpeg decoder with the same arguments), and everything else is left to that path."""
import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from PIL import Image

from pycaffe_cli.data.image import decode_image
from pycaffe_cli.data.plain_jpeg import decode_plain_jpeg, plain_jpeg_frame
from pycaffe_cli.errors import CaffeError
from tests.data.test_image import encode


def photo(height, width, seed=0):
    """(H, W, 3) smooth random colour field: compresses like a photograph."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (height // 8 + 2, width // 8 + 2, 3), dtype=np.uint8)
    return np.asarray(Image.fromarray(coarse).resize((width, height), Image.BILINEAR))


def jpeg(array, **options):
    return encode(array, "JPEG", **options)


def general(data, color):
    """What Pillow's Image.open(...).load() gives, laid out as decode_image returns it."""
    image = Image.open(io.BytesIO(data))
    if color is False:
        image.draft("L", image.size)
        return np.asarray(image.convert("L"))[None]
    if image.mode == "L" and color is None:
        return np.asarray(image)[None]
    return np.asarray(image.convert("RGB"))[:, :, ::-1].transpose(2, 0, 1)


COLOUR_FILES = {
    "baseline 4:2:0": dict(quality=90),
    "4:4:4": dict(quality=95, subsampling=0),
    "4:2:2": dict(quality=75, subsampling=1),
    "progressive": dict(quality=85, progressive=True),
    "optimised tables": dict(quality=80, optimize=True),
}


@pytest.mark.parametrize("name", sorted(COLOUR_FILES))
@pytest.mark.parametrize("size", [(48, 64), (33, 17), (1, 1)])
def test_colour_jpeg_matches_the_general_path(name, size):
    data = jpeg(photo(*size), **COLOUR_FILES[name])
    assert plain_jpeg_frame(data) == size + (3,)
    for color in (True, None):
        pixels = decode_plain_jpeg(data, color)
        assert pixels.shape == (3,) + size and pixels.dtype == np.uint8
        np.testing.assert_array_equal(pixels, general(data, color))


@pytest.mark.parametrize("progressive", [False, True])
def test_grey_jpeg_as_grey_and_as_colour(progressive):
    grey = photo(21, 30)[:, :, 1]
    data = jpeg(grey, quality=90, progressive=progressive)
    assert plain_jpeg_frame(data) == (21, 30, 1)
    expected = general(data, None)
    for color in (None, False):
        np.testing.assert_array_equal(decode_plain_jpeg(data, color), expected)
    np.testing.assert_array_equal(decode_plain_jpeg(data, True), np.repeat(expected, 3, 0))


def test_decode_image_takes_the_plain_path_and_agrees():
    data = jpeg(photo(40, 24), quality=90)
    np.testing.assert_array_equal(decode_image(data, True), general(data, True))
    np.testing.assert_array_equal(decode_image(data, False), general(data, False))


def test_other_bytes_like_objects_decode_through_the_general_path():
    data = jpeg(photo(12, 20), quality=90)
    for wrapped in (memoryview(data), bytearray(data), np.frombuffer(data, np.uint8)):
        assert decode_plain_jpeg(wrapped, True) is None
        np.testing.assert_array_equal(decode_image(wrapped, True), general(data, True))


def test_fill_bytes_before_a_marker_are_skipped():
    data = jpeg(photo(16, 16))
    padded = data[:2] + b"\xff\xff\xff" + data[2:]  # fill bytes before the first segment
    assert plain_jpeg_frame(padded) == (16, 16, 3)
    np.testing.assert_array_equal(decode_plain_jpeg(padded, True), general(data, True))


def with_exif(array):
    exif = Image.Exif()
    exif[274] = 6
    return jpeg(array, exif=exif.tobytes())


@pytest.mark.parametrize("case", ["exif", "cmyk", "png", "junk", "no scan", "empty"])
def test_other_files_are_left_to_the_general_path(case):
    rgb = photo(16, 16)
    data = {
        "exif": lambda: with_exif(rgb),
        "cmyk": lambda: jpeg(Image.fromarray(rgb).convert("CMYK")),
        "png": lambda: encode(rgb, "PNG"),
        "junk": lambda: jpeg(rgb)[:2] + b"\x00" + jpeg(rgb)[2:],
        "no scan": lambda: jpeg(rgb)[:jpeg(rgb).index(b"\xff\xda")],
        "empty": lambda: b"",
    }[case]()
    assert plain_jpeg_frame(data) is None
    assert decode_plain_jpeg(data, True) is None


def test_grey_read_of_a_colour_jpeg_is_left_to_the_general_path():
    assert decode_plain_jpeg(jpeg(photo(16, 16)), False) is None


def test_truncated_data_is_left_to_the_general_path_which_reports_it():
    data = jpeg(photo(64, 64), quality=95)
    scan = data.index(b"\xff\xda")
    data = data[:scan + (len(data) - scan) // 2]
    assert plain_jpeg_frame(data) == (64, 64, 3)
    assert decode_plain_jpeg(data, True) is None
    with pytest.raises(CaffeError, match="could not decode the image: image file is truncated"):
        decode_image(data, True, "the image")


def test_damaged_scan_data_decodes_as_the_general_path_decodes_it():
    # libjpeg only warns about corrupt entropy-coded data and fills what it cannot read;
    # both paths hand back what it made, as cv::imdecode does.
    data = jpeg(photo(64, 64), quality=95)
    scan = data.index(b"\xff\xda")
    damaged = data[:scan + 20] + bytes(len(data) - scan - 20)
    np.testing.assert_array_equal(decode_plain_jpeg(damaged, True), general(damaged, True))


def test_images_over_pillows_pixel_limit_are_left_to_the_general_path(monkeypatch):
    data = jpeg(photo(32, 32))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 32 * 32 - 1)
    assert decode_plain_jpeg(data, True) is None
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 32 * 32 // 2 - 1)  # Pillow refuses
    with pytest.raises(CaffeError, match="could not decode"):
        decode_image(data, True)


def test_threads_decoding_at_once_get_their_own_pixels():
    files = [jpeg(photo(40, 56, seed), quality=90) for seed in range(16)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda data: decode_plain_jpeg(data, True), files * 4))
    for data, pixels in zip(files * 4, results):
        np.testing.assert_array_equal(pixels, general(data, True))


def test_a_pillow_with_other_internal_calls_turns_the_plain_road_off(monkeypatch):
    from pycaffe_cli.data import plain_jpeg

    def changed(*args):
        raise TypeError("jpeg_decoder() takes other arguments")
    monkeypatch.setattr(plain_jpeg, "_jpeg_decoder", changed)
    data = jpeg(photo(16, 24), quality=90)
    assert decode_plain_jpeg(data, True) is None
    assert plain_jpeg._jpeg_decoder is None  # not tried again in this process
    np.testing.assert_array_equal(decode_image(data, True), general(data, True))


def test_matches_opencv_where_installed():
    cv2 = pytest.importorskip("cv2")
    data = jpeg(photo(48, 64), quality=90)
    expected = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    np.testing.assert_array_equal(decode_plain_jpeg(data, True), expected.transpose(2, 0, 1))
