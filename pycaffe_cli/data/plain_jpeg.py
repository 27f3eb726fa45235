"""The common JPEG decoded with the GIL released from the first byte to the last pixel.

Most training images are plain JPEGs: 8 bits, grey or colour (YCbCr or RGB), baseline or
progressive, no EXIF segment. For those, ``decode_plain_jpeg`` skips Pillow's Python header
parser and its copies: it reads the frame header itself, points Pillow's libjpeg decoder
straight at a numpy buffer and reorders the pixels to Caffe's channel-first BGR in a numba
kernel. The decoder and its arguments are the ones ``Image.open(...).load()`` uses, so the
pixels are the same; only the Python around them is gone, which is what kept two decode
threads from running side by side (the Data and ImageData layers decode a batch on the side
threads). Anything else (other formats, EXIF orientation, CMYK, 12-bit or lossless frames,
a grey read of a colour JPEG, truncated data or an error from libjpeg) returns None, and
``data.image.decode_image`` takes Pillow's general path, with its checks and its messages.
(Corrupt entropy-coded data is not an error to libjpeg: it warns, fills in, and both paths
hand back the same pixels, as ``cv::imdecode`` does.)
"""
import numpy as np
from numba import njit
from PIL import Image

_FRAME_MARKERS = (0xC0, 0xC1, 0xC2)  # baseline, extended and progressive Huffman frames
_OTHER_FRAMES = frozenset(range(0xC3, 0xD0)) - {0xC4, 0xC8, 0xCC}  # lossless, arithmetic
_START_OF_SCAN = 0xDA
_EXIF_SEGMENT = 0xE1
_EXIF_HEADER = b"Exif\x00\x00"

try:
    _map_buffer = Image.core.map_buffer
    _jpeg_decoder = Image.core.jpeg_decoder
except AttributeError:  # a Pillow built without JPEG support: the general path reports it
    _map_buffer = _jpeg_decoder = None


def plain_jpeg_frame(data):
    """(height, width, components) of a plain JPEG (see the module doc), else None."""
    if not data.startswith(b"\xff\xd8"):
        return None
    frame = None
    position, end = 2, len(data)
    while position + 4 <= end:
        if data[position] != 0xFF:
            return None
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte before a marker
            position += 1
            continue
        length = (data[position + 2] << 8) | data[position + 3]
        body = position + 4
        if length < 2 or position + 2 + length > end:
            return None
        if marker == _START_OF_SCAN:
            return frame
        if marker == _EXIF_SEGMENT and data.startswith(_EXIF_HEADER, body):
            return None  # may carry an orientation to apply
        if marker in _OTHER_FRAMES:
            return None
        if marker in _FRAME_MARKERS:
            if length < 8 or frame is not None:
                return None
            bits, components = data[body], data[body + 5]
            height = (data[body + 1] << 8) | data[body + 2]
            width = (data[body + 3] << 8) | data[body + 4]
            if bits != 8 or components not in (1, 3) or not height or not width:
                return None
            frame = (height, width, components)
        position += 2 + length
    return None


def decode_plain_jpeg(data, color):
    """(C, H, W) uint8 pixels of a plain JPEG as ``decode_image`` returns them, or None
    when the data is not one (or does not decode cleanly, or is not ``bytes``: other
    bytes-like objects take the general path)."""
    if _jpeg_decoder is None or not isinstance(data, bytes):
        return None
    frame = plain_jpeg_frame(data)
    if frame is None:
        return None
    height, width, components = frame
    limit = Image.MAX_IMAGE_PIXELS
    if limit and height * width > limit:  # the general path warns or refuses
        return None
    if components == 1:
        return _grey(data, height, width, color)
    if color is False:  # libjpeg's own luma plane: Pillow's draft mode, the general path
        return None
    pixels = np.empty((height, width, 4), np.uint8)
    if not _decode_into(data, pixels, "RGBX", "RGB"):
        return None
    out = np.empty((3, height, width), np.uint8)
    _rgbx_to_bgr_planes(pixels, out)
    return out


def _grey(data, height, width, color):
    out = np.empty((3 if color else 1, height, width), np.uint8)
    if not _decode_into(data, out[0], "L", "L"):
        return None
    if color:
        out[1] = out[0]
        out[2] = out[0]
    return out


def _decode_into(data, target, mode, raw_mode):
    """Decode the whole JPEG into the C-contiguous array ``target``; False unless libjpeg
    reached the end of the image without an error. These are Pillow's internal calls (the
    ones ImageFile.load makes): a Pillow whose calls differ turns this road off for the
    process, and every image takes the general one."""
    global _jpeg_decoder
    height, width = target.shape[:2]
    try:
        image = _map_buffer(target, (width, height), "raw", 0, (mode, 0, 1))
        decoder = _jpeg_decoder(mode, raw_mode, "")
    except (TypeError, ValueError, AttributeError):
        _jpeg_decoder = None
        return False
    try:
        decoder.setimage(image, (0, 0, width, height))
        consumed, error = decoder.decode(data)  # libjpeg runs without the GIL here
    finally:
        decoder.cleanup()
    return consumed < 0 and error >= 0


@njit(cache=True, nogil=True)
def _rgbx_to_bgr_planes(rgbx, out):
    height, width = rgbx.shape[0], rgbx.shape[1]
    rows = rgbx.reshape(height, width * 4)  # flat rows: unit-stride loops LLVM vectorises
    for y in range(height):
        row, blue, green, red = rows[y], out[0, y], out[1, y], out[2, y]
        for x in range(width):
            blue[x] = row[4 * x + 2]
            green[x] = row[4 * x + 1]
            red[x] = row[4 * x]
