"""``caffe.io.load_image`` with Pillow, giving the arrays BVLC's gets from scikit-image.

BVLC reads with ``skimage.io.imread(filename, as_gray=not color)`` (imageio's Pillow plugin)
and ``skimage.img_as_float``. What that hands back, and so what we hand back:

- samples scaled to [0, 1]: 8-bit by 1/255, 16-bit by 1/65535 (grey 16-bit PNG and TIFF keep
  16 bits; Pillow reads 16-bit colour PNGs as 8-bit, and so did BVLC), bilevel as 0/1,
  32-bit integer by 1/(2^31 - 1), float images unchanged;
- palette images expanded to their palette's RGB(A); no EXIF rotation;
- ``color=True``: grey images repeated to 3 channels, the alpha channel dropped;
- ``color=False``: colour turned grey as ``skimage.color.rgb2gray`` does
  (0.2125 R + 0.7154 G + 0.0721 B), RGBA first composited over white; grey stays grey.

Where BVLC gives something unusable we give the obvious image instead: grey+alpha files are
treated as grey (BVLC returned two channels), CMYK/YCbCr/LAB/HSV files are converted to RGB
(BVLC returned CMYK as if it were RGBA), and animated files give their first frame (BVLC
returned a stack of frames).
"""
import os
import stat

import numpy as np
from PIL import Image

from pycaffe_cli.io.input_files import IMAGE_LIMIT, file_problem, path_problem, shown

_GRAY_WEIGHTS = (0.2125, 0.7154, 0.0721)  # skimage.color.rgb2gray (ITU-R BT.709 luma)
_AS_IS_MODES = ("1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "I;16N", "F", "RGB", "RGBA")


def load_image(filename, color=True):
    """Load an image file as a float32 array in [0, 1].

    Args:
        filename: path (str or path-like) or a binary file object.
        color: True (default) for (H, W, 3) RGB, grey images repeated to 3 channels; False
            for (H, W, 1) intensity, colour images converted to grey.

    Returns:
        (H, W, 3) or (H, W, 1) float32 array.

    Raises:
        FileNotFoundError: (and other OSErrors naming the file) the file cannot be opened.
        OSError: the path is not a regular file (a pipe, a device, a folder: refused without
            being opened, as the command line refuses them) or larger than 1 GiB, or the file
            is not an image Pillow can decode; the message names the file.
        ValueError: a path that can name no file (a NUL byte, too long).
        TypeError: ``filename`` is neither a path nor a file object, or ``color`` not a bool.
    """
    if not isinstance(color, (bool, np.bool_, int)):
        raise TypeError(f"color must be True or False, got {color!r}")
    pixels = _read_pixels(filename)
    if pixels.ndim == 3 and pixels.shape[2] == 2:
        pixels = _gray_alpha(pixels, color)
    if not color and pixels.ndim == 3:
        image = _rgb_to_gray(pixels)
    else:
        image = _as_float(pixels)
    image = image.astype(np.float32)
    if image.ndim == 2:
        image = image[:, :, np.newaxis]
        if color:
            image = np.tile(image, (1, 1, 3))
    elif image.shape[2] == 4:
        image = image[:, :, :3]
    return image


def _describe(filename):
    if isinstance(filename, (str, bytes, os.PathLike)):
        return repr(os.fsdecode(filename))
    return repr(getattr(filename, "name", filename))


def _open(filename):
    """A binary file object for ``filename``: a path is opened only when it names a regular
    file of at most IMAGE_LIMIT bytes (opening a FIFO would block, a device never ends)."""
    if not isinstance(filename, (str, bytes, os.PathLike)):
        if not callable(getattr(filename, "read", None)):
            raise TypeError(f"filename must be a path or a binary file object, got "
                            f"{type(filename).__name__}")
        return filename
    problem = path_problem(filename)
    if problem:
        raise ValueError(f"cannot read image file '{shown(filename)}': {problem}")
    os.stat(filename)   # a missing or unreachable file: FileNotFoundError etc. naming it
    problem = file_problem(filename, IMAGE_LIMIT)
    if problem:
        raise OSError(f"cannot read image file '{shown(filename)}': {problem}")
    fd = os.open(filename, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):   # swapped for a pipe since the look
        os.close(fd)
        raise OSError(f"cannot read image file '{shown(filename)}': not a regular file")
    return os.fdopen(fd, "rb")


def _read_pixels(filename):
    """The first frame of the file as imageio's Pillow plugin hands it to scikit-image."""
    stream = _open(filename)
    try:
        with Image.open(stream) as image:
            image.load()
            return np.asarray(_imageio_mode(image))
    except Image.UnidentifiedImageError:
        raise OSError(f"cannot read image file {_describe(filename)}: not an image file "
                      "Pillow can decode") from None
    except OSError as error:
        if error.filename is not None:
            raise
        raise OSError(f"cannot read image file {_describe(filename)}: {error}") from error
    except (ValueError, SyntaxError, Image.DecompressionBombError) as error:
        raise OSError(f"cannot read image file {_describe(filename)}: {error}") from error
    finally:
        if stream is not filename:
            stream.close()


def _imageio_mode(image):
    if image.mode == "P":
        return image.convert(image.palette.mode)
    if image.format == "PNG" and image.mode == "I":
        return image.convert("I;16")  # imageio reads 16-bit PNGs as uint16, not int32
    if image.mode in _AS_IS_MODES:
        return image
    if image.mode in ("PA", "RGBa"):
        return image.convert("RGBA")
    if image.mode == "La":
        return image.convert("LA")
    return image.convert("RGB")


def _as_float(pixels):
    """skimage.img_as_float: unsigned integers over their maximum, signed integers over
    theirs (clipped at -1), booleans as 0/1, floats untouched."""
    kind = pixels.dtype.kind
    if kind == "b":
        return pixels.astype(np.float64)
    if kind in "ui":
        scaled = np.multiply(pixels, 1.0 / np.iinfo(pixels.dtype).max, dtype=np.float64)
        return np.maximum(scaled, -1.0) if kind == "i" else scaled
    if pixels.dtype == np.float16:
        return pixels.astype(np.float32)
    return pixels


def _over_white(values, alpha):
    """skimage.color.rgba2rgb's blend over a white background, clipped to [0, 1]."""
    return np.clip((1 - alpha) * 1.0 + alpha * values, 0, 1)


def _rgb_to_gray(pixels):
    """skimage.io.imread(as_gray=True) of an (H, W, 3 or 4) image: RGBA composited over
    white, then rgb2gray."""
    rgb = _as_float(pixels)
    if rgb.shape[2] == 4:
        rgb = _over_white(rgb[:, :, :3], rgb[:, :, 3:])
    return rgb @ np.array(_GRAY_WEIGHTS, dtype=rgb.dtype)


def _gray_alpha(pixels, color):
    """Grey+alpha: the alpha dropped for colour (as BVLC drops RGBA's), composited over
    white for grey (as BVLC composites RGBA)."""
    gray = pixels[:, :, 0]
    if color:
        return gray
    values = _as_float(pixels)
    return _over_white(values[:, :, 0], values[:, :, 1])
