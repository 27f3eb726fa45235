"""Eltwise SUM / PROD / MAX forward and backward against numpy (ties, zeros, propagate_down),
with gradient checks and Caffe's tie rule; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import no_ties, set_up

SHAPE = (2, 3, 4, 5)


def eltwise(params):
    return f'name: "elt" type: "Eltwise" eltwise_param {{ {params} }}'


def inputs(n, shape=SHAPE, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(n)]


def away_from_zero(n, shape, seed=4):
    """Away from zero, so that the unstable top / b_i PROD gradient is accurate."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape) for _ in range(n)]


def distinct_inputs(n, shape=SHAPE, seed=0):
    """No ties anywhere, also across bottoms: one tie-free draw cut into n blobs."""
    values = no_ties(np.random.default_rng(seed), (n,) + shape)
    return list(values)


def tied_inputs(n, shape=(2, 3, 4), seed=0):
    """Few distinct values, so that MAX meets ties between every pair of bottoms."""
    rng = np.random.default_rng(seed)
    return [rng.integers(-2, 3, shape).astype(np.float32) for _ in range(n)]


# Coefficients for n bottoms
COEFFS_FOR = {2: "coeff: -1.5 coeff: 0.25", 3: "coeff: 1 coeff: -0.5 coeff: 2"}
# (params, tied inputs); {coeffs} is filled from COEFFS_FOR
CONFIGS = [("", False), ("operation: SUM", False), ("operation: SUM {coeffs}", False),
           ("operation: PROD", False), ("operation: PROD stable_prod_grad: false", False),
           ("operation: MAX", False), ("operation: MAX", True)]


def caffe_argmax(xs):
    """The winning bottom per element: a tie between bottoms 0 and 1 goes to 1, a later
    bottom wins only if strictly larger."""
    winner = np.where(xs[0] > xs[1], 0, 1)
    best = np.maximum(xs[0], xs[1])
    for i, x in enumerate(xs[2:], start=2):
        winner = np.where(x > best, i, winner)
        best = np.maximum(best, x)
    return winner


def reference(params, xs, dy):
    """(top, [d bottom_i]) in float32 as Caffe computes them."""
    if "PROD" in params:
        y = np.prod(xs, axis=0)
        if "stable_prod_grad: false" in params:
            grads = [y / x * dy for x in xs]
        else:
            grads = [np.prod([x for j, x in enumerate(xs) if j != i], axis=0) * dy
                     for i in range(len(xs))]
        return y, grads
    if "MAX" in params:
        winner = caffe_argmax(xs)
        return np.max(xs, axis=0), [np.where(winner == i, dy, np.float32(0))
                                    for i in range(len(xs))]
    coeffs = [float(c) for c in params.split("coeff:")[1:]] or [1.0] * len(xs)
    y = sum(np.float32(c) * x for c, x in zip(coeffs, xs))
    return y, [np.float32(c) * dy for c in coeffs]


@pytest.mark.parametrize("engine, shape", engine_cases([SHAPE], [(2, 3, 4)]),
                         indirect=["engine"])
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("params, tied", CONFIGS)
def test_forward_backward(engine, shape, n, params, tied):
    """Forward and backward against numpy, all bottoms propagated, then the last one not
    (its diff left as it was)."""
    params = params.format(coeffs=COEFFS_FOR[n])
    xs = tied_inputs(n, shape) if tied else inputs(n, shape)
    dy = np.random.default_rng(7).normal(size=shape).astype(np.float32)
    layer, bottom, top = set_up(eltwise(params), xs)
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    assert top[0].shape == shape
    want_y, want_grads = reference(params, xs, dy)
    np.testing.assert_allclose(top[0].cpu_data, want_y, rtol=1e-6, atol=1e-6)
    top[0].diff[...] = dy
    for down in ([True] * n, [True] * (n - 1) + [False]):
        for blob in bottom:
            blob.diff[...] = 9
        layer.backward(top, down, bottom)
        for blob, want, propagated in zip(bottom, want_grads, down):
            np.testing.assert_allclose(blob.cpu_diff, want if propagated else 9, rtol=1e-6,
                                       atol=1e-6)


def test_sum_with_coefficients(engine):
    xs = inputs(3)
    layer, bottom, top = set_up(eltwise("operation: SUM coeff: 1 coeff: -0.5 coeff: 2"), xs)
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, xs[0] - 0.5 * xs[1] + 2 * xs[2], rtol=1e-6,
                               atol=1e-6)
    top[0].diff[...] = 1
    layer.backward(top, [True] * 3, bottom)
    for blob, c in zip(bottom, (1, -0.5, 2)):
        np.testing.assert_array_equal(blob.diff, c)


COEFFS = "operation: SUM coeff: 1 coeff: -0.5 coeff: 2"


@pytest.mark.parametrize("engine, params, xs", engine_cases(
    [(params, inputs(3, (2, 3, 2))) for params in ("operation: SUM", COEFFS)],
    [(COEFFS, away_from_zero(3, (2, 3)))], unpack=True), indirect=["engine"])
def test_sum_gradient(engine, params, xs):
    layer, bottom, top = set_up(eltwise(params), xs)
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top)


# stable None: the default (stable_prod_grad: true).
@pytest.mark.parametrize("engine, stable, n, shape", engine_cases(
    [(stable, n, (2, 3, 2)) for n in (2, 3) for stable in ("true", "false")],
    [(None, 3, (2, 3)), ("false", 3, (2, 3))], unpack=True), indirect=["engine"])
def test_prod_gradient(engine, stable, n, shape):
    xs = away_from_zero(n, shape)
    params = "operation: PROD" + (f" stable_prod_grad: {stable}" if stable else "")
    layer, bottom, top = set_up(eltwise(params), xs)
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top)


# The simulator divides numpy scalars in its own threads, out of np.errstate's reach.
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("stable, grads", [
    ("true", [[10.0, 0.0, 6.0, -0.0], [0.0, 12.0, 4.5, -0.0], [0.0, 0.0, 36.0, 0.0]]),
    # top / b_i: 0 / 0 is nan, as in Caffe
    ("false", [[np.nan, 0.0, 6.0, np.nan], [0.0, np.nan, 4.5, np.nan], [0.0, 0.0, 36.0, -0.0]]),
])
def test_prod_gradient_with_zeros(engine, stable, grads):
    """Zeros: exact with the stable gradient (the default), Caffe's nan without it."""
    xs = [np.array([0.0, 2.0, 3.0, 0.0]), np.array([5.0, 0.0, 4.0, 0.0]),
          np.array([2.0, 3.0, 0.5, -1.0])]
    layer, bottom, top = set_up(eltwise(f"operation: PROD stable_prod_grad: {stable}"), xs)
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    np.testing.assert_array_equal(top[0].cpu_data, [0.0, 0.0, 6.0, 0.0])
    top[0].diff[...] = [1.0, 2.0, 3.0, 4.0]
    layer.backward(top, [True] * 3, bottom)
    for blob, want in zip(bottom, grads):
        np.testing.assert_allclose(blob.cpu_diff, want)


@pytest.mark.parametrize("engine, n, shape", engine_cases(
    [(n, (2, 3, 2)) for n in (2, 3, 4)], [(3, (2, 3))], unpack=True), indirect=["engine"])
def test_max_gradient(engine, n, shape):
    layer, bottom, top = set_up(eltwise("operation: MAX"), distinct_inputs(n, shape))
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top)


def test_max_backward_routes_to_argmax(engine):
    xs = distinct_inputs(3)
    layer, bottom, top = set_up(eltwise("operation: MAX"), xs)
    layer.forward(bottom, top)
    grad = np.random.default_rng(2).normal(size=SHAPE).astype(np.float32)
    top[0].diff[...] = grad
    layer.backward(top, [True, False, True], bottom)
    winner = np.argmax(xs, axis=0)
    np.testing.assert_array_equal(bottom[0].diff, np.where(winner == 0, grad, 0))
    np.testing.assert_array_equal(bottom[2].diff, np.where(winner == 2, grad, 0))


def test_max_ties_follow_caffe(engine):
    """b0 == b1 goes to bottom 1 (Caffe tests b0 > b1); later bottoms need strictly more."""
    xs = [np.array([1.0, 2.0, 0.0]), np.array([1.0, 1.0, 3.0]), np.array([1.0, 2.0, 3.0])]
    layer, bottom, top = set_up(eltwise("operation: MAX"), xs)
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, [1.0, 2.0, 3.0])
    top[0].diff[...] = 1
    layer.backward(top, [True] * 3, bottom)
    np.testing.assert_array_equal(bottom[0].diff, [0, 1, 0])
    np.testing.assert_array_equal(bottom[1].diff, [1, 0, 1])
    np.testing.assert_array_equal(bottom[2].diff, [0, 0, 0])


def test_propagate_down_false_leaves_diff(engine):
    layer, bottom, top = set_up(eltwise("operation: SUM"), inputs(2))
    layer.forward(bottom, top)
    bottom[1].diff[...] = 9
    top[0].diff[...] = 1
    layer.backward(top, [True, False], bottom)
    np.testing.assert_array_equal(bottom[1].diff, 9)


@pytest.mark.parametrize("params, n, shapes, message", [
    ("operation: SUM coeff: 1", 2, None, "one coefficient per bottom"),
    ("operation: PROD coeff: 1 coeff: 2", 2, None, "only takes coefficients for summation"),
    ("operation: SUM", 2, [(2, 3), (3, 2)], r"bottom\[0\] is 2 3 \(6\), bottom\[1\] is 3 2"),
    ("operation: MAX", 1, None, "at least 2 bottom"),
])
def test_errors(params, n, shapes, message):
    xs = [np.ones(s) for s in shapes] if shapes else inputs(n)
    with pytest.raises(CaffeError, match=f'"elt".*{message}'):
        set_up(eltwise(params), xs)


def test_max_ignores_coefficients_as_caffe_does():
    xs = inputs(2)
    layer, bottom, top = set_up(eltwise("operation: MAX coeff: 3"), xs)
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, np.maximum(*xs))
