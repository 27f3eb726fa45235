"""SSD's noise_param (util/im_transforms.cpp ApplyNoise): each operation on hand-computed cases,
against OpenCV where it is installed, the order of the operations, prob, seeds and errors."""
import numpy as np
import pytest

from pycaffe_cli.data.noise import (_gaussian_kernel_fixed, apply_noise, bgr_to_gray,
                                    bgr_to_lab, bgr_to_ycrcb, check_noise_param, clahe,
                                    equalize_hist, erode_cross, gaussian_blur, jpeg_round_trip,
                                    posterize, salt_pepper, ycrcb_to_bgr)
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.proto import caffe_pb2


def image(seed=0, shape=(19, 27, 3)):
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def smooth(height=40, width=56):
    y, x = np.mgrid[0:height, 0:width]
    planes = [x * 2 + y * 2, 128 + 100 * np.sin(x / 6.0 + y / 9.0), 30 + 3 * x]
    return np.stack(planes, axis=-1).astype(np.uint8)


def noise(text):
    return caffe_pb2.NoiseParameter(**text) if isinstance(text, dict) else text


# --- hand-computed cases ---------------------------------------------------------------------
def test_gray_weights_of_pure_colours():
    bgr = np.array([[[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 255], [0, 0, 0]]],
                   np.uint8)
    # (255 * w + 2^14) >> 15 with w = 3735, 19235, 9798
    np.testing.assert_array_equal(bgr_to_gray(bgr), [[29, 150, 76, 255, 0]])


def test_ycrcb_of_greys_is_neutral_and_round_trips():
    grey = np.repeat(np.arange(256, dtype=np.uint8).reshape(16, 16, 1), 3, axis=2)
    ycrcb = bgr_to_ycrcb(grey)
    np.testing.assert_array_equal(ycrcb[..., 0], grey[..., 0])
    assert (ycrcb[..., 1:] == 128).all()
    np.testing.assert_array_equal(ycrcb_to_bgr(ycrcb), grey)


def test_gaussian_kernel_and_an_impulse():
    # exp(-d^2 / 4.5) normalized: 0.0366, 0.1113, 0.2168, 0.2707; times 256 with the rounding
    # error carried inwards: 9 (9.38), 29 (28.49 + 0.38), 55 (55.49 - 0.14), centre 256 - 186
    kernel = _gaussian_kernel_fixed()
    np.testing.assert_array_equal(kernel, [9, 29, 55, 70, 55, 29, 9])
    impulse = np.zeros((9, 9, 1), np.uint8)
    impulse[4, 4] = 255
    blurred = gaussian_blur(impulse)[..., 0]
    assert blurred[4, 4] == 19                  # 70 * 70 * 255 / 65536 = 19.07
    assert blurred[4, 3] == blurred[3, 4] == 15  # 55 * 70 * 255 / 65536 = 14.98
    np.testing.assert_array_equal(blurred, blurred.T)
    flat = np.full((5, 6, 3), 77, np.uint8)
    np.testing.assert_array_equal(gaussian_blur(flat), flat)


def test_equalize_hist_small_cases():
    # counts 2, 1, 1 above the first level: 255 / 2 per pixel, 127.5 rounds to even 128
    np.testing.assert_array_equal(equalize_hist(np.array([[0, 0, 1, 2]], np.uint8)),
                                  [[0, 0, 128, 255]])
    np.testing.assert_array_equal(equalize_hist(np.full((3, 3), 9, np.uint8)), 9)


def test_clahe_of_a_flat_plane():
    # 2 x 2 tiles of 4 pixels: clip limit max(int(4 * 4 / 256), 1) = 1, so 3 counts are
    # clipped and go one each to bins 0, 85, 170; the LUT at 100 is round(3 * 255 / 4) = 191
    np.testing.assert_array_equal(clahe(np.full((16, 16), 100, np.uint8)), 191)


def test_erode_uses_the_cross():
    plane = np.full((5, 5, 1), 200, np.uint8)
    plane[2, 2] = 0
    out = erode_cross(plane)[..., 0]
    expected = np.full((5, 5), 200)
    expected[2, 2] = expected[1, 2] = expected[3, 2] = expected[2, 1] = expected[2, 3] = 0
    np.testing.assert_array_equal(out, expected)
    # the image border does not count as dark
    np.testing.assert_array_equal(erode_cross(np.full((3, 4, 2), 50, np.uint8)), 50)


def test_posterize_and_inverse():
    values = np.array([[[0, 63, 64], [127, 128, 255]]], np.uint8)
    np.testing.assert_array_equal(posterize(values), [[[32, 32, 96], [96, 160, 224]]])
    out = apply_noise(values, noise({"posterize": True, "inverse": True}), None)
    np.testing.assert_array_equal(out, 255 - posterize(values))


def test_lab_of_known_colours():
    bgr = np.array([[[255, 255, 255], [0, 0, 0], [0, 0, 255]]], np.uint8)
    lab = bgr_to_lab(bgr)[0]
    assert lab.dtype == np.float32
    np.testing.assert_allclose(lab[0], [100, 0, 0], atol=0.01)
    np.testing.assert_allclose(lab[1], [0, 0, 0], atol=0.01)
    np.testing.assert_allclose(lab[2], [53.24, 80.09, 67.20], atol=0.02)   # sRGB red


def test_salt_pepper_counts_values_and_seeds():
    base = np.zeros((10, 10, 3), np.uint8)
    out = salt_pepper(base, 0.1, [255, 7, 300], np.random.default_rng(1))
    touched = out.any(axis=2)
    assert 1 <= touched.sum() <= 10          # floor(0.1 * 10 * 10) draws, with repeats
    np.testing.assert_array_equal(out[touched], [[255, 7, 300 & 0xFF]] * touched.sum())
    again = salt_pepper(base, 0.1, [255, 7, 300], np.random.default_rng(1))
    np.testing.assert_array_equal(out, again)
    np.testing.assert_array_equal(salt_pepper(base, 0.0, [9], np.random.default_rng(1)), base)
    assert not base.any()
    one = salt_pepper(base, 0.5, [9], np.random.default_rng(2))
    assert set(np.unique(one)) == {0, 9} and (one[one.any(axis=2)] == 9).all()


def test_jpeg_round_trip_is_lossy_but_close():
    picture = smooth()
    out = jpeg_round_trip(picture, 95)
    assert out.shape == picture.shape and out.dtype == np.uint8
    assert np.abs(out.astype(int) - picture).mean() < 3
    low = jpeg_round_trip(picture, 5)
    assert np.abs(low.astype(int) - picture).mean() > np.abs(out.astype(int) - picture).mean()
    grey = jpeg_round_trip(picture[..., :1], 50)
    assert grey.shape == picture[..., :1].shape


# --- ApplyNoise ------------------------------------------------------------------------------
def test_prob_is_ignored_as_in_the_fork():
    picture = image()
    for prob in (0.0, 0.5, 1.0):
        out = apply_noise(picture, noise({"prob": prob, "inverse": True}), None)
        np.testing.assert_array_equal(out, 255 - picture)


def test_nothing_switched_on_copies():
    picture = image()
    out = apply_noise(picture, caffe_pb2.NoiseParameter(), None)
    np.testing.assert_array_equal(out, picture)
    assert out is not picture


def test_order_of_the_operations():
    picture = image(3)
    param = noise({"decolorize": True, "gauss_blur": True, "hist_eq": True, "clahe": True,
                   "jpeg": 60, "erode": True, "posterize": True, "inverse": True,
                   "saltpepper": True,
                   "saltpepper_param": caffe_pb2.SaltPepperParameter(fraction=0.2, value=[5]),
                   "convert_to_hsv": True})
    out = apply_noise(picture, param, np.random.default_rng(4))
    grey = np.repeat(bgr_to_gray(picture)[..., None], 3, axis=2)
    step = gaussian_blur(grey)
    ycrcb = bgr_to_ycrcb(step)
    ycrcb[..., 0] = equalize_hist(ycrcb[..., 0])
    step = ycrcb_to_bgr(ycrcb)
    ycrcb = bgr_to_ycrcb(step)
    ycrcb[..., 0] = clahe(ycrcb[..., 0])
    step = 255 - posterize(erode_cross(jpeg_round_trip(ycrcb_to_bgr(ycrcb), 60)))
    step = salt_pepper(step, 0.2, [5], np.random.default_rng(4))
    from pycaffe_cli.data.distort import bgr_to_hsv
    np.testing.assert_array_equal(out, bgr_to_hsv(step))
    lab = apply_noise(picture, noise({"inverse": True, "convert_to_lab": True}), None)
    np.testing.assert_array_equal(lab, bgr_to_lab(255 - picture))


def test_seeded_salt_pepper_through_apply_noise():
    param = noise({"saltpepper": True,
                   "saltpepper_param": caffe_pb2.SaltPepperParameter(fraction=0.3,
                                                                     value=[0, 255, 0])})
    picture = image(5)
    first = apply_noise(picture, param, np.random.default_rng(8))
    np.testing.assert_array_equal(first, apply_noise(picture, param, np.random.default_rng(8)))
    assert not np.array_equal(first, apply_noise(picture, param, np.random.default_rng(9)))


def test_grey_images():
    plane = image(6, (12, 20, 1))
    out = apply_noise(plane, noise({"hist_eq": True, "clahe": True, "jpeg": 80}), None)
    assert out.shape == plane.shape
    expected = jpeg_round_trip(clahe(equalize_hist(plane[..., 0]))[..., None], 80)
    np.testing.assert_array_equal(out, expected)


def test_refusals():
    grey = image(0, (4, 4, 1))
    for name in ("decolorize", "convert_to_hsv", "convert_to_lab"):
        with pytest.raises(CaffeError, match=f"{name} needs 3-channel"):
            apply_noise(grey, noise({name: True}), None)
    param = noise({"saltpepper": True,
                   "saltpepper_param": caffe_pb2.SaltPepperParameter(fraction=0.1,
                                                                     value=[1, 2])})
    assert "1 value or as many as channels: 3 (got 2)" in check_noise_param(param, 3)
    with pytest.raises(CaffeError, match="as many as channels"):
        apply_noise(image(), noise({"saltpepper": True}), np.random.default_rng(0))


# --- against OpenCV --------------------------------------------------------------------------
SHAPES = [(1, 5), (2, 5), (5, 1), (3, 3), (17, 9), (37, 53), (64, 48), (9, 16)]


@pytest.mark.parametrize("shape", SHAPES)
def test_against_opencv(shape):
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(sum(shape))
    picture = rng.integers(0, 256, shape + (3,), dtype=np.uint8)
    peaked = np.clip(rng.normal(100, 6, shape), 0, 255).astype(np.uint8)
    # bit-exact in OpenCV 4: grey, YCrCb, the fixed-point blur, equalizeHist, erosion
    np.testing.assert_array_equal(bgr_to_gray(picture),
                                  cv2.cvtColor(picture, cv2.COLOR_BGR2GRAY))
    np.testing.assert_array_equal(bgr_to_ycrcb(picture),
                                  cv2.cvtColor(picture, cv2.COLOR_BGR2YCrCb))
    np.testing.assert_array_equal(ycrcb_to_bgr(picture),
                                  cv2.cvtColor(picture, cv2.COLOR_YCrCb2BGR))
    np.testing.assert_array_equal(gaussian_blur(picture), cv2.GaussianBlur(picture, (7, 7), 1.5))
    cross = cv2.getStructuringElement(2, (3, 3), (1, 1))
    np.testing.assert_array_equal(erode_cross(picture), cv2.erode(picture, cross))
    for plane in (np.ascontiguousarray(picture[..., 1]), peaked):
        np.testing.assert_array_equal(equalize_hist(plane), cv2.equalizeHist(plane))
        # CLAHE interpolates in float32 like OpenCV; a product may round the other way
        maker = cv2.createCLAHE()
        maker.setClipLimit(4)
        assert np.abs(clahe(plane).astype(int) - maker.apply(plane)).max() <= 1
    out = apply_noise(picture, noise({"convert_to_hsv": True}), None)
    np.testing.assert_array_equal(out, cv2.cvtColor(picture, cv2.COLOR_BGR2HSV))
    # OpenCV 4's float Lab goes through an interpolated table: within 0.5 L/a/b units
    reference = cv2.cvtColor(picture.astype(np.float32) * (1.0 / 255), cv2.COLOR_BGR2Lab)
    assert np.abs(bgr_to_lab(picture) - reference).max() < 0.5


def test_jpeg_against_opencv():
    cv2 = pytest.importorskip("cv2")
    picture = smooth()
    for quality in (10, 60, 95):
        _, buffer = cv2.imencode(".jpg", picture, [cv2.IMWRITE_JPEG_QUALITY, quality])
        reference = cv2.imdecode(buffer, cv2.IMREAD_COLOR)
        # two libjpeg builds: the same format and tables, rounding may differ slightly
        assert np.abs(jpeg_round_trip(picture, quality).astype(int) - reference).max() <= 2
