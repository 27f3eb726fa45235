"""SSD's photometric distortions (SSD's Caffe fork, util/im_transforms.cpp: ApplyDistort and
its RandomBrightness, RandomContrast, RandomSaturation, RandomHue, RandomOrderChannels).

Images are (H, W, C) uint8 in BGR order, as OpenCV holds them. Each distortion happens with
its own probability (``*_prob``):

    brightness:  pixel + delta,         delta uniform in [-brightness_delta, brightness_delta]
    contrast:    pixel * alpha,         alpha uniform in [contrast_lower, contrast_upper]
    saturation:  S * alpha in HSV,      alpha uniform in [saturation_lower, saturation_upper]
    hue:         H + delta in HSV,      delta uniform in [-hue_delta, hue_delta] (H in [0, 180))
    channel order: a random permutation of the three channels

each result rounded to nearest and saturated to [0, 255] as OpenCV's ``convertTo`` does. With
probability 1/2 the order is brightness, contrast, saturation, hue, channels; otherwise
brightness, saturation, hue, contrast, channels. The HSV conversions are OpenCV's 8-bit
``cvtColor`` formulas (COLOR_BGR2HSV: fixed point with 12 fractional bits; COLOR_HSV2BGR: float
arithmetic). As in the fork a saturation step always converts to HSV and back, even for a
factor of 1 (the fork's test for skipping it never holds), and a hue past 255 saturates
before the conversion back wraps it around 180.

Random numbers come from the numpy Generator the caller hands in, so the draws are not the
fork's; the arithmetic on a given draw is.
"""
import numpy as np

from pycaffe_cli.errors import CaffeError

_F32 = np.float32
_HSV_SHIFT = 12
_INDEX = np.arange(1, 256, dtype=np.float64)
# OpenCV's division tables: round(255 << 12 / i) and round(180 << 12 / (6 i)), 0 for i = 0
_SDIV = np.concatenate([[0], np.rint((255 << _HSV_SHIFT) / _INDEX)]).astype(np.int64)
_HDIV = np.concatenate([[0], np.rint((180 << _HSV_SHIFT) / (6 * _INDEX))]).astype(np.int64)
# (b, g, r) as indices into (v, v (1 - s), v (1 - s h), v (1 - s (1 - h))) per hue sector
_SECTORS = np.array([[1, 3, 0], [1, 0, 2], [3, 0, 1], [0, 2, 1], [0, 1, 3], [2, 1, 0]])


def _saturate(values):
    """OpenCV's saturate_cast<uchar> of float32 values: round half to even, clamp."""
    return np.clip(np.rint(values), 0, 255).astype(np.uint8)


def bgr_to_hsv(image):
    """cv::cvtColor(COLOR_BGR2HSV) of an (H, W, 3) uint8 image: H in [0, 180), S and V in
    [0, 255]."""
    pixels = image.astype(np.int64)
    b, g, r = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    v = np.maximum(np.maximum(b, g), r)
    diff = v - np.minimum(np.minimum(b, g), r)
    half = 1 << (_HSV_SHIFT - 1)
    s = (diff * _SDIV[v] + half) >> _HSV_SHIFT
    h = np.where(v == r, g - b, np.where(v == g, b - r + 2 * diff, r - g + 4 * diff))
    h = (h * _HDIV[diff] + half) >> _HSV_SHIFT
    h = np.where(h < 0, h + 180, h)
    return np.stack([np.clip(h, 0, 255), s, v], axis=-1).astype(np.uint8)


def hsv_to_bgr(hsv):
    """cv::cvtColor(COLOR_HSV2BGR) of an (H, W, 3) uint8 HSV image (H in [0, 180); larger
    values wrap around)."""
    h = hsv[..., 0].astype(_F32) * _F32(6.0 / 180.0)
    s = hsv[..., 1].astype(_F32) * _F32(1.0 / 255.0)
    v = hsv[..., 2].astype(_F32) * _F32(1.0 / 255.0)
    h = np.where(h >= 6, h - _F32(6), h)   # H <= 255 wraps at most once
    sector = np.floor(h)
    h = (h - sector).astype(_F32)
    sector = sector.astype(np.int64)
    one = _F32(1)
    table = np.stack([v, v * (one - s), v * (one - s * h), v * (one - s * (one - h))], axis=-1)
    picks = _SECTORS[sector]                                   # (H, W, 3)
    bgr = np.take_along_axis(table, picks, axis=-1)
    bgr = np.where((s == 0)[..., None], v[..., None], bgr)
    return _saturate(bgr * _F32(255))


def adjust_brightness(image, delta):
    """convertTo(alpha 1, beta ``delta``); ``delta`` 0 leaves the image alone."""
    if abs(delta) > 0:
        return _saturate(image.astype(_F32) + _F32(delta))
    return image


def adjust_contrast(image, alpha):
    """convertTo(alpha, beta 0), skipped when ``alpha`` is within 1e-3 of 1."""
    if abs(_F32(alpha) - _F32(1)) > _F32(1e-3):
        return _saturate(image.astype(_F32) * _F32(alpha))
    return image


def adjust_saturation(image, alpha):
    """Scale S in HSV by ``alpha`` (always converting, as the fork does)."""
    hsv = bgr_to_hsv(image)
    hsv[..., 1] = _saturate(hsv[..., 1].astype(_F32) * _F32(alpha))
    return hsv_to_bgr(hsv)


def adjust_hue(image, delta):
    """Add ``delta`` to H in HSV (saturated to [0, 255] first); ``delta`` 0 leaves it alone."""
    if abs(delta) > 0:
        hsv = bgr_to_hsv(image)
        hsv[..., 0] = _saturate(hsv[..., 0].astype(_F32) + _F32(delta))
        return hsv_to_bgr(hsv)
    return image


def check_distort_param(param, channels):
    """The fork's CHECKs on a caffe.DistortionParameter for images of ``channels`` channels,
    as one sentence, or None when it is valid."""
    if param.brightness_delta < 0:
        return f"distort_param brightness_delta must be non-negative (got " \
               f"{param.brightness_delta:g})"
    if param.hue_delta < 0:
        return f"distort_param hue_delta must be non-negative (got {param.hue_delta:g})"
    for name in ("contrast", "saturation"):
        lower, upper = getattr(param, f"{name}_lower"), getattr(param, f"{name}_upper")
        if getattr(param, f"{name}_prob") > 0 and not 0 <= lower <= upper:
            return (f"distort_param needs 0 <= {name}_lower <= {name}_upper (got {lower:g} "
                    f"and {upper:g})")
    needs_color = [name for name in ("saturation", "hue", "random_order")
                   if getattr(param, f"{name}_prob") > 0]
    if needs_color and channels != 3:
        return (f"distort_param {needs_color[0]}_prob needs colour images (3 channels), got "
                f"{channels} channel{'s' if channels != 1 else ''}")
    return None


def apply_distort(image, param, rng):
    """ApplyDistort: the distortions of a caffe.DistortionParameter, in a random one of the
    fork's two orders. ``image`` is (H, W, C) uint8 BGR; returns a new or the same array.

    Raises:
        CaffeError: a parameter the fork refuses (see check_distort_param).
    """
    problem = check_distort_param(param, image.shape[2])
    if problem:
        raise CaffeError(problem)

    def brightness(img):
        if rng.random() < param.brightness_prob:
            return adjust_brightness(img, _uniform(rng, -param.brightness_delta,
                                                   param.brightness_delta))
        return img

    def contrast(img):
        if rng.random() < param.contrast_prob:
            return adjust_contrast(img, _uniform(rng, param.contrast_lower,
                                                 param.contrast_upper))
        return img

    def saturation(img):
        if rng.random() < param.saturation_prob:
            return adjust_saturation(img, _uniform(rng, param.saturation_lower,
                                                   param.saturation_upper))
        return img

    def hue(img):
        if rng.random() < param.hue_prob:
            return adjust_hue(img, _uniform(rng, -param.hue_delta, param.hue_delta))
        return img

    def channel_order(img):
        if rng.random() < param.random_order_prob:
            return np.ascontiguousarray(img[..., rng.permutation(img.shape[2])])
        return img

    if rng.random() > 0.5:
        steps = (brightness, contrast, saturation, hue, channel_order)
    else:
        steps = (brightness, saturation, hue, contrast, channel_order)
    for step in steps:
        image = step(image)
    return image


def _uniform(rng, low, high):
    return float(_F32(rng.uniform(low, high)))
