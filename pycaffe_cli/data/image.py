"""Image decoding and resizing that give OpenCV's numbers, as Caffe's util/io.cpp gets them.

Caffe reads images with ``cv::imread`` / ``cv::imdecode`` and resizes with ``cv::resize``
(``INTER_LINEAR``). We decode with Pillow and reproduce what OpenCV (4.x) hands Caffe:

- colour images as 3 channels in **BGR** order, alpha dropped, grey images replicated;
- grey from colour the way OpenCV's decoders do it: JPEG asks libjpeg for the luma plane
  directly, PNG lets libpng convert with ``(9797 R + 19234 G + 3737 B) >> 15`` (truncating),
  everything else uses ``cvtColor``'s ``(4899 R + 9617 G + 1868 B + 2^13) >> 14``;
- 16-bit samples keep their high byte (libpng's strip_16); the EXIF orientation is applied;
- ``INTER_LINEAR`` resizing as OpenCV computes it (data/linear_resize.py).

Plain JPEGs (most training images) take a faster road to the same pixels
(data/plain_jpeg.py).

Arrays are channel-first, ``(C, H, W)`` uint8, as Caffe lays a Datum out.
"""
import io

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from pycaffe_cli.data.linear_resize import resize_linear
from pycaffe_cli.data.plain_jpeg import decode_plain_jpeg
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.input_files import IMAGE_LIMIT, read_input_bytes

# Pillow modes that OpenCV's IMREAD_ANYCOLOR keeps as one channel.
_GRAY_MODES = ("1", "L", "I", "I;16", "I;16B", "I;16L", "I;16N")


def decode_image(data, color, what="image"):
    """Decode encoded image bytes (PNG, JPEG, BMP, ...) as OpenCV would.

    Args:
        data: the encoded bytes.
        color: True for 3 channels (BGR), False for 1 channel (grey), None for the image's
            own kind (OpenCV's IMREAD_ANYCOLOR: grey stays grey, anything else is BGR).
        what: how to name the image in errors.

    Returns:
        (C, H, W) uint8 array.

    Raises:
        CaffeError: the bytes are not an image Pillow can decode.
    """
    pixels = decode_plain_jpeg(data, color)
    if pixels is not None:
        return pixels
    try:
        image = Image.open(io.BytesIO(data))
        if color is False and image.format == "JPEG" and image.mode in ("RGB", "YCbCr"):
            image.draft("L", image.size)  # libjpeg's own grey output, the luma plane
        image.load()
        image_format = image.format
        if _may_carry_orientation(image):
            image = ImageOps.exif_transpose(image)
    except UnidentifiedImageError:
        raise CaffeError(f"could not decode {what}: not an image format Pillow reads, or its "
                         "header is damaged") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        raise CaffeError(f"could not decode {what}: {error}") from None
    if color is None:
        color = image.mode not in _GRAY_MODES
    pixels = _eight_bit(image, what)
    if color:
        if pixels.ndim == 2:
            return np.repeat(pixels[None], 3, axis=0)
        return np.ascontiguousarray(pixels[:, :, ::-1].transpose(2, 0, 1))
    if pixels.ndim == 3:
        pixels = _to_gray(pixels, image_format)
    return pixels[None]


def _may_carry_orientation(image):
    """False only where the image certainly has no EXIF orientation: a JPEG without an
    EXIF segment (most training images), whose EXIF parse (in Python, holding the GIL the
    side threads share) would find nothing to apply."""
    return image.format != "JPEG" or "exif" in image.info


def _eight_bit(image, what):
    """(H, W) grey or (H, W, 3) RGB uint8 pixels of a Pillow image."""
    mode = image.mode
    if mode in ("L", "RGB"):
        return np.asarray(image)
    if mode == "1":
        return np.asarray(image.convert("L"))
    if mode.startswith("I"):
        return (np.asarray(image).astype(np.int64) >> 8).clip(0, 255).astype(np.uint8)
    if mode == "F":
        raise CaffeError(f"cannot read {what}: floating-point images are not supported")
    if mode in ("RGBA", "RGBX", "RGBa"):
        return np.asarray(image)[:, :, :3]
    return np.asarray(image.convert("RGB"))


def _to_gray(rgb, image_format):
    r, g, b = (rgb[:, :, i].astype(np.int32) for i in range(3))
    if image_format == "PNG":
        gray = (9797 * r + 19234 * g + 3737 * b) >> 15
    else:
        gray = (4899 * r + 9617 * g + 1868 * b + (1 << 13)) >> 14
    return gray.astype(np.uint8)


def read_image(path, height=0, width=0, color=True):
    """Caffe's ReadImageToCVMat: read a file, decode it, resize when height and width > 0.

    Raises:
        CaffeError: the file cannot be opened or decoded, or is not a regular file.
    """
    data = read_input_bytes(path, "image file", IMAGE_LIMIT)
    pixels = decode_image(data, color, f"image file {path!r}")
    if height > 0 and width > 0:
        pixels = resize_linear(pixels, height, width)
    return pixels
