"""The Eltwise element loop (layers/kernels/cpu/eltwise.py): SUM within the float32 bound of
its sum, PROD within that of its product, MAX and the fused ReLU exactly; both sides of the
serial / parallel switch, blocks that do not divide the size, tops that are bottoms; and
``sum_scaled`` (Split's and Eltwise SUM's gradients) to the bit."""
import numpy as np
import pytest

from pycaffe_cli.layers.kernels.cpu import eltwise
from pycaffe_cli.proto import caffe_pb2
from tests.numerics import gamma

SIZES = [1, 37, eltwise.PARALLEL_MIN - 1, eltwise.PARALLEL_MIN + eltwise.BLOCK // 2 + 3]
OPS = {"SUM": eltwise.SUM, "PROD": eltwise.PROD, "MAX": eltwise.MAX}


def bottoms(count, size, seed):
    rng = np.random.default_rng(seed)
    return tuple(rng.uniform(-2, 2, size).astype(np.float32) for _ in range(count))


def run(op, xs, coeffs=None, slope=None, top=None):
    coeffs = np.ones(len(xs), np.float32) if coeffs is None else np.float32(coeffs)
    top = np.full_like(xs[0], 7.0) if top is None else top
    eltwise.combine(op, xs, coeffs, top, np.float32(slope or 0), slope is not None)
    return top


def exact_relu(values, slope):
    """ReLU of float32 ``values`` in float32 (below zero one rounded product, as the kernel's)."""
    if slope is None:
        return values
    return np.where(values > 0, values, values * np.float32(slope))


def test_the_operations_are_caffe_protos():
    assert (eltwise.PROD, eltwise.SUM, eltwise.MAX) == (caffe_pb2.EltwiseParameter.PROD,
                                                        caffe_pb2.EltwiseParameter.SUM,
                                                        caffe_pb2.EltwiseParameter.MAX)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("count, coeffs", [(2, None), (2, [-1.5, 0.25]), (3, [1, -0.5, 2])])
def test_sum_is_within_its_rounding_bound(size, count, coeffs):
    xs = bottoms(count, size, size + count)
    c = np.ones(count) if coeffs is None else np.float64(np.float32(coeffs))
    terms = [ci * x.astype(np.float64) for ci, x in zip(c, xs)]
    # count products and count - 1 sums, each rounded once
    bound = gamma(2 * count) * sum(np.abs(t) for t in terms)
    got = run(eltwise.SUM, xs, coeffs)
    assert np.all(np.abs(got - sum(terms)) <= bound)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("count", [2, 3])
def test_prod_is_within_its_rounding_bound(size, count):
    xs = bottoms(count, size, 2 * size + count)
    exact = np.prod([x.astype(np.float64) for x in xs], axis=0)
    got = run(eltwise.PROD, xs)
    assert np.all(np.abs(got - exact) <= gamma(count - 1) * np.abs(exact))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("count", [2, 3])
def test_max_picks_caffes_winner(size, count):
    rng = np.random.default_rng(size)
    xs = tuple(rng.integers(-3, 4, size).astype(np.float32) for _ in range(count))
    got = run(eltwise.MAX, xs)
    np.testing.assert_array_equal(got, np.max(xs, axis=0))


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("slope", [0.0, 0.25])
@pytest.mark.parametrize("size", [SIZES[1], SIZES[-1]])
def test_a_fused_relu_rectifies_the_combined_value(op, slope, size):
    xs = bottoms(3, size, 5)
    plain = run(OPS[op], xs)
    got = run(OPS[op], xs, slope=slope)
    np.testing.assert_array_equal(got, exact_relu(plain, slope))
    assert (got < 0).any() == (slope > 0)


def test_special_values_follow_numpy():
    """A leading 0 + turns -0 into +0 (numpy sums into zeros); NaN spreads through SUM and
    PROD; MAX takes bottom 1 where bottom 0 is NaN and keeps a NaN once it leads."""
    nan = np.float32(np.nan)
    first = np.array([-0.0, nan, 1.0, 2.0], np.float32)
    second = np.array([-0.0, 3.0, nan, -1.0], np.float32)
    total = run(eltwise.SUM, (first, second))
    assert np.signbit(total[0]) == np.signbit(np.zeros(1, np.float32) + first[0] + second[0])[0]
    assert np.isnan(total[1]) and np.isnan(total[2]) and total[3] == 1
    product = run(eltwise.PROD, (first, second))
    assert np.isnan(product[1]) and np.isnan(product[2]) and product[3] == -2
    biggest = run(eltwise.MAX, (first, second))
    want = np.where(first > second, first, second)
    np.testing.assert_array_equal(biggest, want)
    assert np.isnan(run(eltwise.MAX, (second, first, first))[1])


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("which", [0, 2])
def test_the_top_may_be_a_bottom(op, which):
    size = SIZES[-1]
    xs = bottoms(3, size, 11)
    want = run(OPS[op], xs, slope=0.0)
    copies = tuple(x.copy() for x in xs)
    got = run(OPS[op], copies, slope=0.0, top=copies[which])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize("scale", [1.0, -0.5])
@pytest.mark.parametrize("in_place", [False, True])
def test_sum_scaled_is_numpys_add_chain(size, count, scale, in_place):
    """The gradients of Split (a sum of the tops' diffs, in Caffe's order) and of Eltwise SUM
    (a coefficient times the top's diff) to the bit, signed zeros and NaN included."""
    xs = bottoms(count, size, 5)
    xs[0][:3] = [-0.0, np.nan, np.inf][:min(3, size)]
    want = xs[0].copy()
    for x in xs[1:]:
        want = want + x
    if scale != 1:
        want = np.float32(scale) * want
    out = xs[0] if in_place else np.full_like(xs[0], 7.0)
    eltwise.sum_scaled(xs, np.float32(scale), out)
    np.testing.assert_array_equal(out.view(np.int32), want.view(np.int32))
