"""cv::resize(INTER_LINEAR) to the bit: golden values from OpenCV 4.10, and every value
computed from OpenCV's tables one at a time."""
import numpy as np

from pycaffe_cli.data.linear_resize import axis_table, resize_linear
from tests.data.test_image import chw, pattern

# cv2.resize(pattern(), (4, 3), interpolation=cv2.INTER_LINEAR), as (C, H, W).
CV_DOWN = [[[17, 39, 61, 83], [82, 119, 155, 192], [147, 198, 100, 76]],
           [[70, 92, 114, 137], [135, 172, 208, 245], [199, 80, 57, 98]],
           [[123, 145, 167, 189], [188, 225, 37, 42], [189, 48, 99, 151]]]
# cv2.resize(pattern()[:, :, 1], (11, 8), interpolation=cv2.INTER_LINEAR).
CV_UP = [[53, 58, 65, 72, 79, 86, 93, 100, 107, 114, 119],
         [69, 75, 84, 92, 100, 109, 117, 126, 134, 142, 148],
         [92, 100, 110, 120, 131, 141, 151, 162, 172, 183, 190],
         [115, 124, 137, 149, 161, 174, 186, 198, 211, 223, 232],
         [139, 149, 163, 177, 192, 206, 170, 155, 169, 184, 194],
         [162, 173, 190, 206, 222, 239, 102, 31, 48, 64, 76],
         [185, 198, 203, 130, 109, 127, 74, 52, 70, 89, 102],
         [201, 215, 211, 68, 18, 38, 58, 77, 97, 117, 131]]


def test_resize_matches_opencv_downscale():
    np.testing.assert_array_equal(resize_linear(chw(pattern()), 3, 4), CV_DOWN)


def test_resize_matches_opencv_upscale():
    np.testing.assert_array_equal(resize_linear(chw(pattern()[:, :, 1:2]), 8, 11)[0], CV_UP)


def test_resize_exact_half_is_2x2_average():
    src = np.random.default_rng(0).integers(0, 256, (2, 6, 8), dtype=np.uint8)
    blocks = src.reshape(2, 3, 2, 4, 2).astype(np.int64).sum(axis=(2, 4))
    np.testing.assert_array_equal(resize_linear(src, 3, 4), (blocks + 2) >> 2)


def linear_reference(src, height, width):
    """cv::resize(INTER_LINEAR) for uint8, one output value at a time from OpenCV's tables:
    each output pixel's two horizontal sums (11-bit weights), then the vertical pass's
    16-bit products."""
    channels, src_h, src_w = src.shape
    xofs, alpha0, alpha1 = axis_table(src_w, width, clamp=True)
    yofs, beta0, beta1 = axis_table(src_h, height, clamp=False)
    out = np.empty((channels, height, width), np.int64)
    plane = src.astype(np.int64)
    for y in range(height):
        r0, r1 = min(max(yofs[y], 0), src_h - 1), min(max(yofs[y] + 1, 0), src_h - 1)
        for x in range(width):
            x0, x1 = xofs[x], min(xofs[x] + 1, src_w - 1)
            s0 = plane[:, r0, x0] * alpha0[x] + plane[:, r0, x1] * alpha1[x]
            s1 = plane[:, r1, x0] * alpha0[x] + plane[:, r1, x1] * alpha1[x]
            out[:, y, x] = ((((s0 >> 4) * beta0[y]) >> 16) + (((s1 >> 4) * beta1[y]) >> 16)
                            + 2) >> 2
    return out.clip(0, 255)


def test_resize_computes_each_value_from_opencvs_tables():
    # Shrinking and growing by various factors, rows reused or skipped by the row buffers.
    rng = np.random.default_rng(7)
    for src_h, src_w, height, width in [(9, 13, 5, 7), (5, 4, 17, 11), (20, 3, 7, 9),
                                        (1, 6, 4, 2), (7, 7, 1, 1), (12, 30, 12, 10),
                                        (31, 17, 8, 40)]:
        src = rng.integers(0, 256, (3, src_h, src_w), dtype=np.uint8)
        np.testing.assert_array_equal(resize_linear(src, height, width),
                                      linear_reference(src, height, width))


def test_resize_same_size_is_identity():
    src = chw(pattern())
    assert resize_linear(src, 5, 7) is src
