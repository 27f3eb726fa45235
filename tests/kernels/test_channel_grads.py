"""kernels/cpu/channel_grads.py: Scale's backward pass. The bias's sum and dx are numpy's
float32 arithmetic to the bit; the scale's gradient, a sum of products in pairwise order,
is within float32's bound of the exact sum; each part alone, in place, on one thread and
across threads."""
import numpy as np
import pytest

from pycaffe_cli.blob import read_only
from pycaffe_cli.layers.kernels.cpu import channel_grads
from tests.numerics import gamma

SHAPES = [  # (outer, channels, inner)
    (4, 3, 1),
    (2, 3, 20),
    (9, 1, 5),
    (3, 7, 1 << 12),               # past PARALLEL_MIN
    (1, 2, 90_000),
]


def run(dy, x, scale, parts, in_place):
    outer, channels, inner = dy.shape
    scale_grad = np.full(channels, np.nan) if "scale" in parts else channel_grads.NO_SUMS
    bias_grad = np.full(channels, np.nan) if "bias" in parts else channel_grads.NO_SUMS
    dx = channel_grads.NO_VALUES
    source = dy
    if "dx" in parts:
        dx = dy.copy() if in_place else np.full_like(dy, np.nan)
        source = dx if in_place else dy
    channel_grads.scale_backward(read_only(source.reshape(-1)), read_only(x.reshape(-1)),
                                 read_only(scale), outer, channels, inner, scale_grad,
                                 bias_grad, dx.reshape(-1))
    return scale_grad, bias_grad, dx


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("parts", [("scale", "bias", "dx"), ("scale",), ("bias",), ("dx",)])
@pytest.mark.parametrize("in_place", [False, True])
def test_each_gradient(shape, parts, in_place):
    rng = np.random.default_rng(4)
    dy, x = rng.standard_normal((2,) + shape).astype(np.float32)
    scale = rng.standard_normal(shape[1]).astype(np.float32)
    scale_grad, bias_grad, dx = run(dy, x, scale, parts, in_place)
    if "scale" in parts:
        products = dy.astype(np.float64) * x
        # each row's products and sums in float32, the rows in float64
        bound = gamma(shape[2]) * np.abs(products).sum(axis=(0, 2))
        np.testing.assert_array_less(np.abs(scale_grad - products.sum(axis=(0, 2))), bound)
    if "bias" in parts:
        np.testing.assert_array_equal(bias_grad, dy.sum(axis=2).sum(axis=0, dtype=np.float64))
    if "dx" in parts:
        np.testing.assert_array_equal(dx, dy * scale[None, :, None])
