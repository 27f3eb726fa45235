"""SSD's photometric distortions (util/im_transforms.cpp): OpenCV's 8-bit HSV conversions,
brightness and contrast as convertTo rounds them, the random steps and their seeds."""
import numpy as np
import pytest

from pycaffe_cli.data.distort import (adjust_brightness, adjust_contrast, adjust_hue,
                                      adjust_saturation, apply_distort, bgr_to_hsv,
                                      check_distort_param, hsv_to_bgr)
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.proto import caffe_pb2


def image(seed=0, shape=(16, 24, 3)):
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def test_hsv_of_known_colours():
    bgr = np.array([[[0, 0, 255], [0, 255, 0], [255, 0, 0], [255, 255, 255], [0, 0, 0],
                     [0, 128, 255], [30, 60, 90]]], np.uint8)
    hsv = bgr_to_hsv(bgr)
    # red 0, green 60, blue 120 (degrees / 2); white and black have no saturation
    np.testing.assert_array_equal(hsv[0, :5], [[0, 255, 255], [60, 255, 255], [120, 255, 255],
                                               [0, 0, 255], [0, 0, 0]])
    # orange: h = 60 * 128 / 255 degrees -> 15; (90, 60, 30) RGB: h 30 degrees -> 15
    np.testing.assert_array_equal(hsv[0, 5], [15, 255, 255])
    np.testing.assert_array_equal(hsv[0, 6], [15, 170, 90])
    back = hsv_to_bgr(hsv)
    assert np.abs(back.astype(int) - bgr).max() <= 1


def test_hsv_matches_opencv():
    cv2 = pytest.importorskip("cv2")
    pixels = image(1, (64, 64, 3))
    np.testing.assert_array_equal(bgr_to_hsv(pixels), cv2.cvtColor(pixels, cv2.COLOR_BGR2HSV))
    hsv = bgr_to_hsv(pixels)
    # OpenCV's vectorised HSV2BGR rounds a few values the other way: one grey level at most
    back = hsv_to_bgr(hsv).astype(int)
    assert np.abs(back - cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)).max() <= 1


def test_brightness_and_contrast_round_and_saturate():
    pixels = np.array([[[0, 100, 250]]], np.uint8)
    np.testing.assert_array_equal(adjust_brightness(pixels, 10.5), [[[10, 110, 255]]])
    np.testing.assert_array_equal(adjust_brightness(pixels, -20.0), [[[0, 80, 230]]])
    assert adjust_brightness(pixels, 0.0) is pixels
    np.testing.assert_array_equal(adjust_contrast(pixels, 1.5), [[[0, 150, 255]]])
    np.testing.assert_array_equal(adjust_contrast(np.array([[[5, 7, 1]]], np.uint8), 0.5),
                                  [[[2, 4, 0]]])      # 2.5 and 3.5 round to even
    assert adjust_contrast(pixels, 1.0005) is pixels


def test_saturation_and_hue():
    grey = np.full((2, 2, 3), 77, np.uint8)
    np.testing.assert_array_equal(adjust_saturation(grey, 1.5), grey)
    red = np.array([[[0, 0, 200]]], np.uint8)
    # hue + 60 (120 degrees): red turns green
    np.testing.assert_array_equal(adjust_hue(red, 60.0), [[[0, 200, 0]]])
    # hue past 180 wraps around (170 + 20 = 190 -> 10), below 0 it saturates, as in the fork
    magenta = np.array([[[85, 0, 255]]], np.uint8)
    assert bgr_to_hsv(magenta)[0, 0, 0] == 170
    assert bgr_to_hsv(adjust_hue(magenta, 20.0))[0, 0, 0] == 10
    np.testing.assert_array_equal(adjust_hue(red, -10.0), red)
    np.testing.assert_array_equal(adjust_saturation(red, 0.0), [[[200, 200, 200]]])


def test_apply_distort_is_seeded():
    param = caffe_pb2.DistortionParameter(
        brightness_prob=1, brightness_delta=32, contrast_prob=1, contrast_lower=0.5,
        contrast_upper=1.5, saturation_prob=1, saturation_lower=0.5, saturation_upper=1.5,
        hue_prob=1, hue_delta=18, random_order_prob=1)
    pixels = image()
    first = apply_distort(pixels, param, np.random.default_rng(4))
    again = apply_distort(pixels, param, np.random.default_rng(4))
    np.testing.assert_array_equal(first, again)
    assert first.shape == pixels.shape and first.dtype == np.uint8
    assert not np.array_equal(first, pixels)
    # nothing happens with every probability 0
    quiet = caffe_pb2.DistortionParameter(brightness_delta=32)
    assert apply_distort(pixels, quiet, np.random.default_rng(0)) is pixels


def test_distort_checks():
    assert check_distort_param(caffe_pb2.DistortionParameter(), 1) is None
    assert "brightness_delta" in check_distort_param(
        caffe_pb2.DistortionParameter(brightness_delta=-1), 3)
    assert "contrast_lower" in check_distort_param(
        caffe_pb2.DistortionParameter(contrast_prob=1, contrast_lower=2, contrast_upper=1), 3)
    assert "colour" in check_distort_param(caffe_pb2.DistortionParameter(hue_prob=0.5), 1)
    with pytest.raises(CaffeError, match="hue_delta"):
        apply_distort(image(), caffe_pb2.DistortionParameter(hue_delta=-2),
                      np.random.default_rng(0))
