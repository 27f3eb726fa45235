"""kernels/cpu/channel_affine.py: Scale's one-pass product, bias and ReLU, and BatchNorm's
normalisation, against numpy's float32 arithmetic in each layer's order (product, then bias;
difference, then quotient), to the bit; in place, on one thread and across threads."""
import numpy as np
import pytest

from pycaffe_cli.blob import read_only
from pycaffe_cli.layers.kernels.cpu import channel_affine
from pycaffe_cli.layers.kernels.cpu.layout import NO_BIAS

SHAPES = [  # (outer, channels, inner)
    (2, 3, 20),
    (1, 5, 1),                     # one value a channel
    (3, 7, 1 << 12),               # past PARALLEL_MIN, rows that do not fill BLOCK evenly
    (1, 3, 90_000),                # rows longer than BLOCK
]


def reference(x, scale, bias, slope):
    y = x * scale[None, :, None]
    if bias is not None:
        y = y + bias[None, :, None]
    if slope is None:
        return y
    return np.where(y > 0, y, y * np.float32(slope)) if slope else np.where(y > 0, y, 0)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("slope", [None, 0.0, 0.25])
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("saving", [False, True])
def test_one_pass_is_numpys_arithmetic(shape, with_bias, slope, in_place, saving):
    rng = np.random.default_rng(0)
    outer, channels, inner = shape
    x = rng.standard_normal(shape).astype(np.float32)
    scale = rng.standard_normal(channels).astype(np.float32)
    bias = rng.standard_normal(channels).astype(np.float32) if with_bias else None
    want = reference(x, scale, bias, slope)
    given = x.copy()
    y = x if in_place else np.full_like(x, np.nan)
    saved = np.full(x.size, np.nan, np.float32) if saving else None
    # read-only operands, as Scale passes its blobs' cpu_data: one compiled signature
    channel_affine.forward(read_only(x.reshape(-1)), read_only(scale),
                           NO_BIAS if bias is None else read_only(bias), with_bias,
                           y.reshape(-1), np.float32(slope or 0), slope is not None, channels,
                           inner, saved)
    np.testing.assert_array_equal(y, want)
    if saving:  # the bottom as it was, in place too
        np.testing.assert_array_equal(saved.reshape(shape), given)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("in_place", [False, True])
def test_normalize_is_batch_norms_numpy_arithmetic(shape, in_place):
    rng = np.random.default_rng(1)
    outer, channels, inner = shape
    x = rng.standard_normal(shape).astype(np.float32)
    mean = rng.standard_normal(channels).astype(np.float32)
    std = np.sqrt(rng.uniform(0.5, 2, channels).astype(np.float32) + np.float32(1e-5))
    want = (x - mean[None, :, None]) / std[None, :, None]
    y = x if in_place else np.full_like(x, np.nan)
    channel_affine.normalize(read_only(x.reshape(-1)), read_only(mean), read_only(std),
                             y.reshape(-1), channels, inner)
    np.testing.assert_array_equal(y, want)
