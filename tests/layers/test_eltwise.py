"""Eltwise SUM / PROD / MAX against numpy, with gradient checks and Caffe's tie rule."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import compare_layer_modes, engine_cases
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


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("params, reference", [
    ("", lambda xs: sum(xs)),
    ("operation: SUM", lambda xs: sum(xs)),
    ("operation: PROD", lambda xs: np.prod(xs, axis=0)),
    ("operation: MAX", lambda xs: np.max(xs, axis=0)),
])
def test_forward(n, params, reference):
    xs = inputs(n)
    layer, bottom, top = set_up(eltwise(params), xs)
    layer.forward(bottom, top)
    assert top[0].shape == SHAPE
    np.testing.assert_allclose(top[0].data, reference(xs), rtol=1e-6, atol=1e-6)


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


def test_stable_prod_grad_handles_zeros(engine):
    xs = [np.array([0.0, 2.0, 3.0]), np.array([5.0, 0.0, 4.0]), np.array([2.0, 3.0, 0.5])]
    layer, bottom, top = set_up(eltwise("operation: PROD"), xs)
    layer.forward(bottom, top)
    top[0].diff[...] = [1.0, 2.0, 3.0]
    layer.backward(top, [True] * 3, bottom)
    np.testing.assert_allclose(bottom[0].diff, [10.0, 0.0, 6.0])
    np.testing.assert_allclose(bottom[1].diff, [0.0, 12.0, 4.5])
    np.testing.assert_allclose(bottom[2].diff, [0.0, 0.0, 36.0])


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


# --- GPU mode ------------------------------------------------------------------------------
def tied_inputs(n, shape=(2, 3, 4), seed=0):
    """Few distinct values, so that MAX meets ties between every pair of bottoms."""
    rng = np.random.default_rng(seed)
    return [rng.integers(-2, 3, shape).astype(np.float32) for _ in range(n)]


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("params", [
    "operation: SUM",
    "operation: SUM coeff: 1 coeff: -0.5 coeff: 2",
    "operation: PROD",
    "operation: PROD stable_prod_grad: false",
    "operation: MAX",
])
def test_gpu_matches_cpu(n, params):
    if "coeff" in params and n == 2:
        params = "operation: SUM coeff: -1.5 coeff: 0.25"
    xs = tied_inputs(n) if "MAX" in params else inputs(n, (2, 3, 4))
    dy = np.random.default_rng(7).normal(size=xs[0].shape)
    down = [True] * (n - 1) + [n == 2]
    compare_layer_modes(eltwise(params), xs, top_diffs=[dy], propagate_down=down)


# The simulator divides numpy scalars in its own threads, out of np.errstate's reach.
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("stable", ["true", "false"])
def test_gpu_prod_with_zeros(stable):
    """Zeros: exact with the stable gradient, the same inf / nan as the CPU without it."""
    xs = [np.array([0.0, 2.0, 3.0, 0.0]), np.array([5.0, 0.0, 4.0, 0.0]),
          np.array([2.0, 3.0, 0.5, -1.0])]
    compare_layer_modes(eltwise(f"operation: PROD stable_prod_grad: {stable}"), xs,
                        top_diffs=[np.array([1.0, 2.0, 3.0, 4.0])])
