"""(N, C, P) <-> (C, N, P) reorderings with the fused bias add and bias-gradient sums."""
import math

import numpy as np
import pytest

from pycaffe_cli.layers.kernels.cpu import layout

SHAPES = [(1, 1, 1), (3, 4, 1), (2, 3, 5), (4, 3, 8), (5, 7, 9), (2, 5, 64), (3, 2, 127),
          (2, 3, 128), (4, 3, 130), (2, 2, 576), (1, 3, 1000), (2, 2, 8193),
          (2, 3, 349526)]  # the last past layout.PARALLEL_MIN: the forward moves in threads


def test_the_last_shape_is_past_the_serial_limit():
    assert math.prod(SHAPES[-1]) >= layout.PARALLEL_MIN


def bits(array):
    return np.ascontiguousarray(array).view(np.int32)


def data(shape, seed=0):
    x = np.random.default_rng(seed).normal(scale=3.0, size=shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[:3] = [-0.0, 0.0, -0.0][:flat.size]
    return x


@pytest.mark.parametrize("shape", SHAPES)
def test_images_to_channels_and_back(shape):
    num, channels, size = shape
    x = data(shape)
    y = np.full(x.size, np.nan, np.float32)
    layout.images_to_channels(x.reshape(-1), num, channels, size, y)
    np.testing.assert_array_equal(bits(y.reshape(channels, num, size)),
                                  bits(x.transpose(1, 0, 2)))
    back = np.full(x.size, np.nan, np.float32)
    layout.channels_to_images(y, num, channels, size, back)
    np.testing.assert_array_equal(bits(back), bits(x.reshape(-1)))


@pytest.mark.parametrize("shape", SHAPES)
def test_bias_add_is_numpys_float32_add(shape):
    num, channels, size = shape
    y = data((channels, num, size))
    bias = data(channels, seed=1)
    out = np.full(y.size, np.nan, np.float32)
    layout.channels_to_images_bias(y.reshape(-1), num, channels, size, bias, out)
    want = y.transpose(1, 0, 2) + bias.reshape(1, -1, 1)
    np.testing.assert_array_equal(bits(out.reshape(num, channels, size)), bits(want))


@pytest.mark.parametrize("shape", SHAPES)
def test_channel_sums_are_numpys_sums_to_the_bit(shape):
    # The bias gradient was diff.sum(axis=(0, 2)); the kernels keep its exact numbers.
    num, channels, size = shape
    x = data(shape)
    want = x.sum(axis=(0, 2))
    sums = np.zeros(channels, np.float32)
    moved = np.empty(x.size, np.float32)
    layout.images_to_channels_sum(x.reshape(-1), num, channels, size, moved, sums)
    np.testing.assert_array_equal(bits(sums), bits(want))
    np.testing.assert_array_equal(bits(moved.reshape(channels, num, size)),
                                  bits(x.transpose(1, 0, 2)))
    sums = np.zeros(channels, np.float32)
    layout.channel_sums(x.reshape(-1), num, channels, size, sums)
    np.testing.assert_array_equal(bits(sums), bits(want))
    exact = x.astype(np.float64).sum(axis=(0, 2))
    np.testing.assert_allclose(sums, exact, rtol=1e-5, atol=1e-4)


def test_channel_sums_carry_over_blocks_of_images():
    # A batch reordered in blocks adds each block to the running sums: same numbers.
    num, channels, size = 7, 3, 50
    x = data((num, channels, size))
    sums = np.zeros(channels, np.float32)
    moved = np.empty(x.size, np.float32)
    for first, count in ((0, 3), (3, 3), (6, 1)):
        block = x[first:first + count].reshape(-1)
        layout.images_to_channels_sum(block, count, channels, size, moved[:block.size], sums)
    np.testing.assert_array_equal(bits(sums), bits(x.sum(axis=(0, 2))))


def test_empty_batch_leaves_sums_alone():
    sums = np.full(3, 2.5, np.float32)
    layout.channel_sums(np.empty(0, np.float32), 0, 3, 4, sums)
    np.testing.assert_array_equal(sums, 2.5)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 16, 127, 128, 129, 136, 1000, 4097])
def test_pairwise_sum_matches_numpy_reduce(n):
    a = data(n + 5, seed=n)
    got = layout.pairwise_sum(a, 5, n)
    np.testing.assert_array_equal(bits(np.float32(got)), bits(np.add.reduce(a[5:])))
    assert got == pytest.approx(math.fsum(a[5:].astype(np.float64)), rel=1e-5, abs=1e-4)
