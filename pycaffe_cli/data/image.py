"""Image decoding and resizing that give OpenCV's numbers, as Caffe's util/io.cpp gets them.

Caffe reads images with ``cv::imread`` / ``cv::imdecode`` and resizes with ``cv::resize``
(``INTER_LINEAR``). We decode with Pillow and reproduce what OpenCV (4.x) hands Caffe:

- colour images as 3 channels in **BGR** order, alpha dropped, grey images replicated;
- grey from colour the way OpenCV's decoders do it: JPEG asks libjpeg for the luma plane
  directly, PNG lets libpng convert with ``(9797 R + 19234 G + 3737 B) >> 15`` (truncating),
  everything else uses ``cvtColor``'s ``(4899 R + 9617 G + 1868 B + 2^13) >> 14``;
- 16-bit samples keep their high byte (libpng's strip_16); the EXIF orientation is applied;
- ``INTER_LINEAR`` resizing without antialiasing: source position ``(d + 0.5) * scale - 0.5``,
  11-bit fixed-point weights, and the rounding of OpenCV's SIMD vertical pass. (Pillow's own
  bilinear filter antialiases when shrinking and so disagrees with OpenCV.)

Arrays are channel-first, ``(C, H, W)`` uint8, as Caffe lays a Datum out.
"""
import io

import numpy as np
from numba import njit
from PIL import Image, ImageOps, UnidentifiedImageError

from pycaffe_cli.data.plain_jpeg import decode_plain_jpeg
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.input_files import IMAGE_LIMIT, read_input_bytes

# Pillow modes that OpenCV's IMREAD_ANYCOLOR keeps as one channel.
_GRAY_MODES = ("1", "L", "I", "I;16", "I;16B", "I;16L", "I;16N")
_RESIZE_COEF_SCALE = 2048  # OpenCV's INTER_RESIZE_COEF_SCALE (11 fractional bits)


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


# --- cv::resize(INTER_LINEAR) -------------------------------------------------------------
def _axis_table(src_size, dst_size, clamp):
    """Source index and the two fixed-point weights per destination index (OpenCV's
    xofs/ialpha or yofs/ibeta; only the horizontal table is clamped at the borders)."""
    scale = 1.0 / (dst_size / src_size)
    pos = ((np.arange(dst_size) + 0.5) * scale - 0.5).astype(np.float32)
    index = np.floor(pos).astype(np.int64)
    frac = (pos - index.astype(np.float32)).astype(np.float32)
    if clamp:
        low = index < 0
        frac[low], index[low] = 0, 0
        high = index >= src_size - 1
        frac[high], index[high] = 0, src_size - 1
    coef = np.float32(_RESIZE_COEF_SCALE)
    weight0 = np.rint((np.float32(1) - frac) * coef).astype(np.int64)
    weight1 = np.rint(frac * coef).astype(np.int64)
    return index, weight0, weight1


def resize_linear(pixels, height, width):
    """Resize (C, H, W) uint8 pixels to (C, height, width) exactly as OpenCV's
    ``cv::resize(..., INTER_LINEAR)`` does for 8-bit images."""
    channels, src_h, src_w = pixels.shape
    if (src_h, src_w) == (height, width):
        return pixels
    xofs, alpha0, alpha1 = _axis_table(src_w, width, clamp=True)
    yofs, beta0, beta1 = _axis_table(src_h, height, clamp=False)
    # Unsigned indices: numba then adds no wrap-around test for negative ones to the loops'
    # gathers, which costs a third of the kernel's time.
    left = xofs.astype(np.uintp)
    right = np.minimum(xofs + 1, src_w - 1).astype(np.uintp)
    top = np.clip(yofs, 0, src_h - 1).astype(np.uintp)
    bottom = np.clip(yofs + 1, 0, src_h - 1).astype(np.uintp)
    out = np.empty((channels, height, width), np.uint8)
    _resize_kernel(np.ascontiguousarray(pixels), left, right, alpha0, alpha1, top, bottom,
                   beta0, beta1, out)
    return out


@njit(cache=True, nogil=True)
def _resize_kernel(src, left, right, alpha0, alpha1, row0, row1, beta0, beta1, out):
    """OpenCV's two passes: each source row's horizontal pass once (two rows kept, as
    OpenCV's ring of row buffers does), then the vertical pass over two of them."""
    channels, height, width = out.shape
    rows = np.empty((2, width), np.int32)
    for c in range(channels):
        held0, held1 = -1, -1  # the source row each buffer holds
        for y in range(height):
            top, bottom = row0[y], row1[y]
            first = 0 if held0 == top else 1 if held1 == top else -1
            second = 0 if held0 == bottom else 1 if held1 == bottom else -1
            if first < 0:
                first = 1 if second == 0 else 0
                _horizontal_row(src[c, top], left, right, alpha0, alpha1, rows[first])
                if first == 0:
                    held0 = top
                else:
                    held1 = top
                if bottom == top:
                    second = first
            if second < 0:
                second = 1 - first
                _horizontal_row(src[c, bottom], left, right, alpha0, alpha1, rows[second])
                if second == 0:
                    held0 = bottom
                else:
                    held1 = bottom
            _vertical_row(rows[first], rows[second], beta0[y], beta1[y], out[c, y])


@njit(cache=True, nogil=True, inline="always")
def _horizontal_row(source, left, right, alpha0, alpha1, buffer):
    for x in range(buffer.shape[0]):
        buffer[x] = source[left[x]] * alpha0[x] + source[right[x]] * alpha1[x]


@njit(cache=True, nogil=True, inline="always")
def _vertical_row(upper, lower, weight0, weight1, out_row):
    # OpenCV's vectorised vertical pass: 16-bit products, keep the high halves.
    for x in range(out_row.shape[0]):
        value = ((((upper[x] >> 4) * weight0) >> 16) + (((lower[x] >> 4) * weight1) >> 16)
                 + 2) >> 2
        out_row[x] = min(max(value, 0), 255)
