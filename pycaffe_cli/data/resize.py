"""SSD's resize_param (SSD's Caffe fork, util/im_transforms.cpp: ApplyResize, InferNewSize,
AspectKeepingResizeAndPad, AspectKeepingResizeBySmall).

Images are (C, H, W) uint8. The output size of an ``old_w`` x ``old_h`` image for a
``width`` x ``height`` resize_param, with ``aspect = old_w / old_h`` in float32:

    WARP                    height x width (the aspect ratio changes)
    FIT_SMALL_SIZE          the smaller side fits: height x int(aspect * height) when aspect
                            >= width / height, else int(width / aspect) x width
    FIT_LARGE_SIZE_AND_PAD  the larger side fits, and the rest is padded (pad_mode CONSTANT
                            with pad_value, MIRRORED, REPEAT_NEAREST) to height x width, the
                            image centred (the extra pixel of an odd padding at the bottom or
                            right)

``interp_mode`` lists the interpolations to choose from, uniformly per image (LINEAR when
empty). LINEAR and NEAREST give OpenCV's ``cv::resize`` pixels exactly (LINEAR through
pycaffe_cli/data/linear_resize.py); AREA averages the covered source area when shrinking and
blends as OpenCV's INTER_AREA does when enlarging, CUBIC (a = -0.75) and LANCZOS4 (8 taps) are
OpenCV's kernels computed in float, so these three can differ from OpenCV's fixed-point
results by a grey level here and there. ``resize_param.prob`` is ignored, as in the fork.
"""
import numpy as np

from pycaffe_cli.data.linear_resize import resize_linear
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.proto import caffe_pb2

_P = caffe_pb2.ResizeParameter
_F32 = np.float32
_PAD_MODES = {_P.CONSTANT: "constant", _P.MIRRORED: "reflect", _P.REPEAT_NEAREST: "edge"}


def check_resize_param(param, channels=None):
    """The fork's CHECKs on a caffe.ResizeParameter, as one sentence, or None."""
    if param.height <= 0 or param.width <= 0:
        return (f"resize_param height and width must be positive (got {param.height} x "
                f"{param.width})")
    if channels is not None and len(param.pad_value) not in (0, 1, channels):
        return (f"resize_param: specify either 1 pad_value or as many as channels: {channels} "
                f"(got {len(param.pad_value)})")
    return None


def new_size(param, height, width):
    """InferNewSize: (height, width) of the image resize_param makes of a height x width one."""
    new_h, new_w = int(param.height), int(param.width)
    if param.resize_mode == _P.FIT_SMALL_SIZE:
        orig_aspect = _F32(width) / _F32(height)
        if orig_aspect < _F32(new_w) / _F32(new_h):
            new_h = int(_F32(new_w) / orig_aspect)
        else:
            new_w = int(orig_aspect * _F32(new_h))
    return new_h, new_w


def _fit_large_geometry(param, height, width):
    """(resized h, resized w, top, bottom, left, right) of FIT_LARGE_SIZE_AND_PAD."""
    new_h, new_w = int(param.height), int(param.width)
    orig_aspect = _F32(width) / _F32(height)
    if orig_aspect > _F32(new_w) / _F32(new_h):
        inner = int(np.floor(_F32(new_w) / orig_aspect))
        top = int(np.floor((new_h - inner) / 2.0))
        return inner, new_w, top, new_h - inner - top, 0, 0
    inner = int(np.floor(orig_aspect * _F32(new_h)))
    left = int(np.floor((new_w - inner) / 2.0))
    return new_h, inner, 0, 0, left, new_w - inner - left


def apply_resize(image, param, rng):
    """ApplyResize: the (C, h, w) uint8 image a caffe.ResizeParameter makes of ``image``.

    Raises:
        CaffeError: a parameter the fork refuses, or a size that would be empty.
    """
    channels, height, width = image.shape
    problem = check_resize_param(param, channels)
    if problem:
        raise CaffeError(problem)
    interp = _P.LINEAR
    if len(param.interp_mode):
        interp = param.interp_mode[int(rng.integers(len(param.interp_mode)))]
    pad = None
    if param.resize_mode == _P.FIT_LARGE_SIZE_AND_PAD:
        out_h, out_w, *pad = _fit_large_geometry(param, height, width)
    elif param.resize_mode == _P.FIT_SMALL_SIZE:
        out_h, out_w = new_size(param, height, width)
    else:
        out_h, out_w = int(param.height), int(param.width)
    if out_h <= 0 or out_w <= 0:
        raise CaffeError(f"resize_param turns a {height} x {width} image into an empty one "
                         f"({out_h} x {out_w})")
    resized = resize(image, out_h, out_w, interp)
    if pad is None or not any(pad):
        return resized
    top, bottom, left, right = pad
    widths = ((0, 0), (top, bottom), (left, right))
    mode = _PAD_MODES[param.pad_mode]
    if mode != "constant":
        return np.pad(resized, widths, mode=mode)
    values = np.zeros(channels)
    if len(param.pad_value):
        values[:] = np.broadcast_to(np.asarray(param.pad_value, np.float64), (channels,))
    out = np.empty((channels, out_h + top + bottom, out_w + left + right), np.uint8)
    out[:] = np.clip(np.rint(values), 0, 255).astype(np.uint8)[:, None, None]
    out[:, top:top + out_h, left:left + out_w] = resized
    return out


def resize(image, height, width, interp=_P.LINEAR):
    """cv::resize of a (C, H, W) uint8 image with a ResizeParameter.Interp_mode."""
    src_h, src_w = image.shape[1:]
    if (src_h, src_w) == (height, width):
        return image
    if interp == _P.NEAREST:
        rows = np.minimum(np.floor(np.arange(height) * (src_h / height)).astype(np.int64),
                          src_h - 1)
        cols = np.minimum(np.floor(np.arange(width) * (src_w / width)).astype(np.int64),
                          src_w - 1)
        return np.ascontiguousarray(image[:, rows][:, :, cols])
    if interp == _P.AREA and height <= src_h and width <= src_w:
        matrix_y = _area_weights(src_h, height)
        matrix_x = _area_weights(src_w, width)
    elif interp == _P.AREA:
        matrix_y = _area_enlarge_weights(src_h, height)
        matrix_x = _area_enlarge_weights(src_w, width)
    elif interp in (_P.CUBIC, _P.LANCZOS4):
        matrix_y = _kernel_weights(src_h, height, interp)
        matrix_x = _kernel_weights(src_w, width, interp)
    else:
        return resize_linear(image, height, width)
    out = (matrix_y @ image.astype(np.float64)) @ matrix_x.T   # rows, then columns
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def _area_weights(src, dst):
    """(dst, src) weights: the share of each source pixel in a destination pixel's span."""
    scale = src / dst
    starts = np.arange(dst) * scale
    ends = starts + scale
    edges = np.arange(src)
    overlap = (np.minimum(ends[:, None], edges[None, :] + 1)
               - np.maximum(starts[:, None], edges[None, :]))
    weights = np.clip(overlap, 0, None)
    return weights / weights.sum(axis=1, keepdims=True)


def _area_enlarge_weights(src, dst):
    """(dst, src) weights of OpenCV's INTER_AREA where an axis is not only shrunk: a linear
    blend of the pixels ``floor(d * src / dst)`` and the next, by the part of the destination
    pixel past the source pixel's end."""
    index = np.floor(np.arange(dst) * (src / dst)).astype(np.int64)
    frac = (np.arange(dst) + 1) - (index + 1) * (dst / src)
    frac = np.where(frac <= 0, 0.0, frac - np.floor(frac))
    matrix = np.zeros((dst, src))
    rows = np.arange(dst)
    np.add.at(matrix, (rows, np.clip(index, 0, src - 1)), 1 - frac)
    np.add.at(matrix, (rows, np.clip(index + 1, 0, src - 1)), frac)
    return matrix


def _cubic(x):
    a = -0.75
    x = np.abs(x)
    return np.where(x <= 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                    np.where(x < 2, ((a * x - 5 * a) * x + 8 * a) * x - 4 * a, 0.0))


def _lanczos4(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.sinc(x) * np.sinc(x / 4)
    return np.where(np.abs(x) < 4, value, 0.0)


def _kernel_weights(src, dst, interp):
    """(dst, src) weights of OpenCV's CUBIC or LANCZOS4 taps around each destination pixel's
    source position ``(d + 0.5) * src / dst - 0.5``, borders replicated, rows summing to 1."""
    taps = 2 if interp == _P.CUBIC else 4
    kernel = _cubic if interp == _P.CUBIC else _lanczos4
    pos = (np.arange(dst) + 0.5) * (src / dst) - 0.5
    base = np.floor(pos).astype(np.int64)
    matrix = np.zeros((dst, src))
    for k in range(-taps + 1, taps + 1):
        index = base + k
        weight = kernel(pos - index)
        np.add.at(matrix, (np.arange(dst), np.clip(index, 0, src - 1)), weight)
    return matrix / matrix.sum(axis=1, keepdims=True)
