"""SSD's resize_param (util/im_transforms.cpp): output sizes of the three modes, padding,
and the interpolations against OpenCV where it is installed."""
import numpy as np
import pytest

from pycaffe_cli.data.resize import apply_resize, check_resize_param, new_size, resize
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.proto import caffe_pb2

R = caffe_pb2.ResizeParameter


def image(shape=(3, 9, 13), seed=0):
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def test_new_sizes():
    assert new_size(R(height=5, width=7), 9, 13) == (5, 7)
    assert new_size(R(resize_mode=R.FIT_LARGE_SIZE_AND_PAD, height=5, width=7), 9, 13) == (5, 7)
    # FIT_SMALL_SIZE: the smaller side fits, the other is truncated
    assert new_size(R(resize_mode=R.FIT_SMALL_SIZE, height=6, width=6), 9, 13) == (6, 8)
    assert new_size(R(resize_mode=R.FIT_SMALL_SIZE, height=6, width=6), 13, 9) == (8, 6)


def test_fit_large_size_and_pad_modes():
    pixels = image((1, 2, 4))
    constant = R(resize_mode=R.FIT_LARGE_SIZE_AND_PAD, height=5, width=4, pad_value=[9])
    out = apply_resize(pixels, constant, np.random.default_rng(0))
    # 2 rows of content; floor(3 / 2) = 1 row above, 2 below
    np.testing.assert_array_equal(out[0, 1:3], pixels[0])
    assert (out[0, 0] == 9).all() and (out[0, 3:] == 9).all()
    mirrored = R(resize_mode=R.FIT_LARGE_SIZE_AND_PAD, height=5, width=4, pad_mode=R.MIRRORED)
    out = apply_resize(pixels, mirrored, np.random.default_rng(0))
    np.testing.assert_array_equal(out[0], pixels[0][[1, 0, 1, 0, 1]])
    nearest = R(resize_mode=R.FIT_LARGE_SIZE_AND_PAD, height=5, width=4,
                pad_mode=R.REPEAT_NEAREST)
    out = apply_resize(pixels, nearest, np.random.default_rng(0))
    np.testing.assert_array_equal(out[0], pixels[0][[0, 0, 1, 1, 1]])
    # a tall image pads left and right, per-channel values
    tall = apply_resize(image((3, 4, 2)), R(resize_mode=R.FIT_LARGE_SIZE_AND_PAD, height=4,
                                            width=4, pad_value=[1, 2, 3]),
                        np.random.default_rng(0))
    np.testing.assert_array_equal(tall[:, 0, 0], [1, 2, 3])
    np.testing.assert_array_equal(tall[:, :, 1:3], image((3, 4, 2)))


def test_interp_mode_is_drawn_per_image():
    pixels = image()
    param = R(height=5, width=6, interp_mode=[R.NEAREST, R.LINEAR])
    outs = {apply_resize(pixels, param, np.random.default_rng(seed)).tobytes()
            for seed in range(8)}
    assert outs == {resize(pixels, 5, 6, R.NEAREST).tobytes(),
                    resize(pixels, 5, 6, R.LINEAR).tobytes()}


@pytest.mark.parametrize("size", [(5, 6), (20, 31), (9, 4)])
def test_interpolations_match_opencv(size):
    cv2 = pytest.importorskip("cv2")
    pixels = image()
    hwc = pixels.transpose(1, 2, 0)
    height, width = size
    modes = {R.NEAREST: (cv2.INTER_NEAREST, 0), R.LINEAR: (cv2.INTER_LINEAR, 0),
             R.AREA: (cv2.INTER_AREA, 1), R.CUBIC: (cv2.INTER_CUBIC, 1),
             R.LANCZOS4: (cv2.INTER_LANCZOS4, 1)}
    for mode, (flag, tolerance) in modes.items():
        ours = resize(pixels, height, width, mode).astype(int)
        theirs = cv2.resize(hwc, (width, height), interpolation=flag).transpose(2, 0, 1)
        assert np.abs(ours - theirs).max() <= tolerance, mode


def test_resize_checks():
    assert check_resize_param(R(height=3, width=3)) is None
    assert "positive" in check_resize_param(R(height=3))
    assert "pad_value" in check_resize_param(R(height=3, width=3, pad_value=[1, 2]), 3)
    with pytest.raises(CaffeError, match="empty"):
        apply_resize(image((1, 1, 40)), R(resize_mode=R.FIT_LARGE_SIZE_AND_PAD, height=4,
                                          width=4), np.random.default_rng(0))
