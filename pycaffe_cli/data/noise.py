"""SSD's image degradations, ``transform_param { noise_param { ... } }`` (SSD's Caffe fork,
util/im_transforms.cpp: ApplyNoise), on (H, W, C) uint8 BGR images as OpenCV holds them.

The fork applies every operation that is switched on, in this order:

    decolorize      BGR -> grey -> BGR (cvtColor's 8-bit fixed-point luma, OpenCV 4 weights)
    gauss_blur      GaussianBlur, 7 x 7 kernel, sigma 1.5, reflected borders (OpenCV's
                    bit-exact 8-bit fixed-point filter)
    hist_eq         equalizeHist of the Y plane of YCrCb (of the image itself if grey)
    clahe           CLAHE, clip limit 4, 8 x 8 tiles, on the Y plane of YCrCb (or the grey image)
    jpeg            re-encode as JPEG of quality int(jpeg) when jpeg > 0, and decode
    erode           erode with the 3 x 3 ellipse (a cross: the pixel and its 4 neighbours)
    posterize       colorReduce with div 64: v // 64 * 64 + 32 (4 levels per channel)
    inverse         255 - v
    saltpepper      floor(fraction * H * W) random pixels (drawn with repeats) set to the
                    saltpepper_param value(s): one value for every channel or one per channel
    convert_to_hsv  cvtColor BGR2HSV (8 bits: H in [0, 180))
    convert_to_lab  cvtColor BGR2Lab of the image scaled to [0, 1] as float32: L in [0, 100],
                    a and b about [-127, 127], returned as a float32 image

``prob`` is not read: the fork applies noise_param whenever it is set, to every image, whatever
prob says (its default, 0, would otherwise switch noise off), and so does pycaffe.

Deviations, where the fork breaks: the fork feeds convert_to_lab's float image to a loop that
reads bytes, so the net receives garbage; pycaffe passes the Lab values on as floats. JPEG
re-encoding of a grey image returns a 3-channel image in the fork (which then scrambles the
blob); pycaffe keeps it grey. Operations that need 3 channels (decolorize, convert_to_hsv,
convert_to_lab) refuse other images instead of failing in OpenCV, and saltpepper without a
saltpepper_param value is refused (the fork reads past an empty list).

JPEG goes through Pillow's libjpeg, not OpenCV's: the same format and quality scale, with pixel
values that may differ by a few grey levels from OpenCV's. CLAHE's interpolation is float32
arithmetic as in OpenCV and may differ by one grey level where a product rounds the other way.
Lab is the exact formula (sRGB gamma, D65 white) in double precision; OpenCV 4 computes float
Lab through an interpolated table, up to about 0.5 L/a/b units away.
Random numbers (salt-and-pepper positions) come from the numpy Generator the caller hands in.
"""
import io
import math

import numpy as np
from PIL import Image

from pycaffe_cli.data.distort import bgr_to_hsv
from pycaffe_cli.errors import CaffeError

_F32 = np.float32
_SHIFT = 14                          # OpenCV's yuv_shift
_HALF = 1 << (_SHIFT - 1)
_B2Y, _G2Y, _R2Y = 1868, 9617, 4899  # round(0.114, 0.587, 0.299 * 2^14)
_GRAY_SHIFT = 15
_B2GRAY, _G2GRAY, _R2GRAY = 3735, 19235, 9798    # 0.114, 0.587, 0.299 * 2^15, sum 2^15
_CR, _CB = 11682, 9241               # round(0.713, 0.564 * 2^14)
_CR2R, _CR2G, _CB2G, _CB2B = 22987, -11698, -5636, 29049  # 1.403, -0.714, -0.344, 1.773
_CLAHE_CLIP = 4.0
_CLAHE_TILES = 8
_POSTERIZE_DIV = 64
_BLUR_SIZE, _BLUR_SIGMA, _BLUR_BITS = 7, 1.5, 8


def check_noise_param(param, channels):
    """The reason the fork (or OpenCV under it) would fail on ``param`` for images of
    ``channels`` channels, or None."""
    if channels != 3:
        for name in ("decolorize", "convert_to_hsv", "convert_to_lab"):
            if getattr(param, name):
                return f"noise_param {name} needs 3-channel (BGR) images, not {channels}"
    if param.saltpepper:
        values = param.saltpepper_param.value
        if len(values) not in (1, channels):
            return (f"noise_param saltpepper_param needs 1 value or as many as channels: "
                    f"{channels} (got {len(values)})")
    return None


def apply_noise(image, param, rng):
    """ApplyNoise: ``image`` (H, W, C) uint8 BGR degraded as caffe.NoiseParameter ``param``
    says. Returns uint8 (H, W, C), or float32 with convert_to_lab; ``image`` is not changed.

    Raises:
        CaffeError: see check_noise_param.
    """
    problem = check_noise_param(param, image.shape[2])
    if problem:
        raise CaffeError(problem)
    out = image
    if param.decolorize:
        out = np.repeat(bgr_to_gray(out)[..., None], 3, axis=2)
    if param.gauss_blur:
        out = gaussian_blur(out)
    if param.hist_eq:
        out = _on_luma(out, equalize_hist)
    if param.clahe:
        out = _on_luma(out, clahe)
    if param.jpeg > 0:
        out = jpeg_round_trip(out, int(param.jpeg))
    if param.erode:
        out = erode_cross(out)
    if param.posterize:
        out = posterize(out)
    if param.inverse:
        out = 255 - out
    if param.saltpepper:
        out = salt_pepper(out, param.saltpepper_param.fraction,
                          param.saltpepper_param.value, rng)
    if param.convert_to_hsv:
        out = bgr_to_hsv(out)
    if param.convert_to_lab:
        out = bgr_to_lab(out)
    return out if out is not image else image.copy()


# --- colour conversions ------------------------------------------------------------------------
def _descale(values):
    return (values + _HALF) >> _SHIFT


def bgr_to_gray(image):
    """cvtColor(COLOR_BGR2GRAY) of (H, W, 3) uint8: (H, W) uint8, with OpenCV 4's 15-bit
    weights (older releases, such as the fork was built with, used the 14-bit weights of
    YCrCb: at most 1 grey level apart)."""
    pixels = image.astype(np.int64)
    weighted = pixels[..., 0] * _B2GRAY + pixels[..., 1] * _G2GRAY + pixels[..., 2] * _R2GRAY
    return ((weighted + (1 << (_GRAY_SHIFT - 1))) >> _GRAY_SHIFT).astype(np.uint8)


def bgr_to_ycrcb(image):
    """cvtColor(COLOR_BGR2YCrCb) of (H, W, 3) uint8, OpenCV's 8-bit fixed point."""
    pixels = image.astype(np.int64)
    b, r = pixels[..., 0], pixels[..., 2]
    y = _descale(b * _B2Y + pixels[..., 1] * _G2Y + r * _R2Y)
    cr = _descale((r - y) * _CR + (128 << _SHIFT))
    cb = _descale((b - y) * _CB + (128 << _SHIFT))
    return np.clip(np.stack([y, cr, cb], axis=-1), 0, 255).astype(np.uint8)


def ycrcb_to_bgr(image):
    """cvtColor(COLOR_YCrCb2BGR) of (H, W, 3) uint8, OpenCV's 8-bit fixed point."""
    pixels = image.astype(np.int64)
    y, cr, cb = pixels[..., 0], pixels[..., 1] - 128, pixels[..., 2] - 128
    b = y + _descale(cb * _CB2B)
    g = y + _descale(cb * _CB2G + cr * _CR2G)
    r = y + _descale(cr * _CR2R)
    return np.clip(np.stack([b, g, r], axis=-1), 0, 255).astype(np.uint8)


def bgr_to_lab(image):
    """The fork's convert_to_lab: cvtColor(COLOR_BGR2Lab) of the float32 image / 255 (sRGB,
    D65). Returns float32 (H, W, 3): L in [0, 100], a, b."""
    rgb = (image[..., ::-1].astype(_F32) * _F32(1.0 / 255)).astype(np.float64)
    linear = np.where(rgb > 0.04045, ((rgb + 0.055) / 1.055) ** 2.4, rgb / 12.92)
    xyz = linear @ np.array([[0.412453, 0.212671, 0.019334],
                             [0.357580, 0.715160, 0.119193],
                             [0.180423, 0.072169, 0.950227]])
    xyz /= np.array([0.950456, 1.0, 1.088754])
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16.0 / 116.0)
    y = xyz[..., 1]
    lightness = np.where(y > 0.008856, 116.0 * f[..., 1] - 16.0, 903.3 * y)
    a = 500.0 * (f[..., 0] - f[..., 1])
    b = 200.0 * (f[..., 1] - f[..., 2])
    return np.stack([lightness, a, b], axis=-1).astype(_F32)


def _on_luma(image, operation):
    """``operation`` on the Y plane of YCrCb for colour images (back to BGR after), on the
    image itself for grey ones."""
    if image.shape[2] == 1:
        return operation(image[..., 0])[..., None]
    ycrcb = bgr_to_ycrcb(image)
    ycrcb[..., 0] = operation(ycrcb[..., 0])
    return ycrcb_to_bgr(ycrcb)


# --- histogram equalization ----------------------------------------------------------------
def equalize_hist(plane):
    """equalizeHist of an (H, W) uint8 plane."""
    hist = np.bincount(plane.ravel(), minlength=256)
    first = int(np.flatnonzero(hist)[0])
    total = plane.size
    if hist[first] == total:
        return np.full_like(plane, first)
    scale = _F32(255.0 / (total - hist[first]))   # OpenCV: (256 - 1.f) / (total - count)
    sums = np.cumsum(hist).astype(np.int64) - hist[first]
    lut = np.clip(np.rint(sums.astype(_F32) * scale), 0, 255).astype(np.uint8)
    lut[:first + 1] = 0
    return lut[plane]


def clahe(plane, clip_limit=_CLAHE_CLIP, tiles=_CLAHE_TILES):
    """cv::createCLAHE() with setClipLimit(clip_limit) and tiles x tiles tiles, applied to an
    (H, W) uint8 plane (OpenCV's algorithm: clipped, redistributed tile histograms, bilinear
    interpolation of the tile LUTs in float32)."""
    height, width = plane.shape
    source = plane
    if height % tiles or width % tiles:
        # OpenCV pads both sides (reflect 101) even when only one does not divide
        source = _reflect101_pad(plane, (0, tiles - height % tiles), (0, tiles - width % tiles))
    tile_h, tile_w = source.shape[0] // tiles, source.shape[1] // tiles
    tile_total = tile_h * tile_w
    blocks = source[:tile_h * tiles, :tile_w * tiles].reshape(tiles, tile_h, tiles, tile_w)
    blocks = blocks.transpose(0, 2, 1, 3).reshape(tiles * tiles, tile_total).astype(np.int64)
    offsets = (np.arange(tiles * tiles) * 256)[:, None]
    hist = np.bincount((blocks + offsets).ravel(),
                       minlength=tiles * tiles * 256).reshape(tiles * tiles, 256)
    if clip_limit > 0:
        limit = max(int(clip_limit * tile_total / 256), 1)
        clipped = np.maximum(hist - limit, 0).sum(axis=1)
        hist = np.minimum(hist, limit) + (clipped // 256)[:, None]
        residual = clipped % 256
        step = np.maximum(256 // np.maximum(residual, 1), 1)
        index = np.arange(256)[None, :]
        # bins 0, step, 2 step, ... get one more, residual of them at most
        hist += ((residual[:, None] > 0) & (index % step[:, None] == 0)
                 & (index // step[:, None] < residual[:, None]))
    lut_scale = _F32(255.0 / tile_total)
    luts = np.clip(np.rint(np.cumsum(hist, axis=1).astype(_F32) * lut_scale), 0, 255)
    luts = luts.astype(_F32).reshape(tiles, tiles, 256)

    def axis_weights(size, tile):
        position = np.arange(size, dtype=_F32) * _F32(_F32(1.0) / _F32(tile)) - _F32(0.5)
        low = np.floor(position).astype(np.int64)
        frac = (position - low.astype(_F32)).astype(_F32)
        return np.maximum(low, 0), np.minimum(low + 1, tiles - 1), frac

    ty1, ty2, ya = axis_weights(height, tile_h)
    tx1, tx2, xa = axis_weights(width, tile_w)
    xa1 = (_F32(1) - xa)[None, :]
    xa = xa[None, :]
    ya = ya[:, None]
    values = plane.astype(np.int64)
    top = luts[ty1[:, None], tx1[None, :], values] * xa1 + luts[ty1[:, None], tx2[None, :],
                                                               values] * xa
    bottom = luts[ty2[:, None], tx1[None, :], values] * xa1 + luts[ty2[:, None], tx2[None, :],
                                                                  values] * xa
    result = top * (_F32(1) - ya) + bottom * ya
    return np.clip(np.rint(result), 0, 255).astype(np.uint8)


# --- filters -------------------------------------------------------------------------------
def _reflect101_pad(array, pad_h, pad_w):
    """copyMakeBorder with BORDER_REFLECT_101 (numpy's "reflect") on the first two axes."""
    for axis, pad in enumerate((pad_h, pad_w)):
        pads = [(0, 0)] * array.ndim
        pads[axis] = pad
        # OpenCV repeats a 1-pixel side, which has nothing to reflect
        array = np.pad(array, pads, mode="edge" if array.shape[axis] == 1 else "reflect")
    return array


def _gaussian_kernel_fixed(size=_BLUR_SIZE, sigma=_BLUR_SIGMA, bits=_BLUR_BITS):
    """OpenCV's 8-bit Gaussian kernel: the double kernel rounded to ``bits`` fractional bits
    with error diffusion from the outside in, the centre taking what makes the sum exactly 1."""
    half = size // 2
    scale = -0.5 / (sigma * sigma)
    values = [math.exp(scale * (i - half) ** 2) for i in range(half)]
    total = 2.0 * sum(values) + 1.0
    unit = float(1 << bits)
    kernel = [0] * size
    error = 0.0
    used = 0
    for i in range(half):
        adjusted = values[i] / total * unit + error
        rounded = int(round(adjusted))   # OpenCV's cvRound: half to even
        error = adjusted - rounded
        kernel[i] = kernel[size - 1 - i] = rounded
        used += 2 * rounded
    kernel[half] = (1 << bits) - used
    return np.array(kernel, np.int64)


def gaussian_blur(image):
    """GaussianBlur(image, Size(7, 7), 1.5) of (H, W, C) uint8 as OpenCV 4 computes it:
    separable, the row pass exact in 8 fractional bits, the column pass in 16, rounded to
    nearest (older releases filtered with a float kernel: at most 1 grey level apart)."""
    kernel = _gaussian_kernel_fixed()
    half = len(kernel) // 2
    height, width = image.shape[:2]
    padded = _reflect101_pad(image.astype(np.int64), (half, half), (half, half))
    rows = sum(kernel[k] * padded[:, k:k + width] for k in range(len(kernel)))
    both = sum(kernel[k] * rows[k:k + height] for k in range(len(kernel)))
    shift = 2 * _BLUR_BITS
    return ((both + (1 << (shift - 1))) >> shift).astype(np.uint8)


def erode_cross(image):
    """erode with getStructuringElement(MORPH_ELLIPSE, Size(3, 3)), the cross; pixels outside
    the image do not count (OpenCV's default border for erosion)."""
    padded = np.pad(image, [(1, 1), (1, 1), (0, 0)], mode="constant", constant_values=255)
    height, width = image.shape[:2]
    out = np.minimum(padded[1:-1, 1:-1], padded[:-2, 1:-1])
    out = np.minimum(out, padded[2:, 1:-1])
    out = np.minimum(out, padded[1:-1, :-2])
    return np.minimum(out, padded[1:-1, 2:])[:height, :width]


def posterize(image, div=_POSTERIZE_DIV):
    """colorReduce(image, div): every value v becomes v // div * div + div // 2."""
    lut = (np.arange(256) // div * div + div // 2).astype(np.uint8)
    return lut[image]


def salt_pepper(image, fraction, values, rng):
    """constantNoise: floor(fraction * H * W) pixels, picked uniformly with repeats, set to
    ``values`` (one for all channels, or one per channel, each cast to uint8)."""
    height, width, channels = image.shape
    count = int(math.floor(_F32(fraction) * _F32(width) * _F32(height)))
    out = image.copy()
    if count <= 0:
        return out
    fill = np.array([int(v) & 0xFF for v in values], np.uint8)   # the fork's uchar(float)
    fill = np.broadcast_to(fill, (channels,))
    cols = rng.integers(width, size=count)
    rows = rng.integers(height, size=count)
    out[rows, cols] = fill
    return out


def jpeg_round_trip(image, quality):
    """imencode(".jpg", IMWRITE_JPEG_QUALITY quality) and imdecode, through Pillow."""
    quality = min(max(quality, 0), 100)
    grey = image.shape[2] == 1
    picture = Image.fromarray(image[..., 0] if grey else image[..., ::-1].copy())
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", quality=max(quality, 1))
    buffer.seek(0)
    with Image.open(buffer) as decoded:
        pixels = np.asarray(decoded.convert("L" if grey else "RGB"))
    return pixels[..., None].copy() if grey else pixels[..., ::-1].copy()
