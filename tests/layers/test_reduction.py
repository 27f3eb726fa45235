"""Reduction: every operation over every axis with coeff, backward formulas, gradients; on both
engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import set_up

SHAPE = (2, 3, 4)
OPS = {
    "SUM": lambda rows: rows.sum(axis=1),
    "ASUM": lambda rows: np.abs(rows).sum(axis=1),
    "SUMSQ": lambda rows: (rows ** 2).sum(axis=1),
    "MEAN": lambda rows: rows.mean(axis=1),
}


def reduction(params):
    return f'name: "red" type: "Reduction" reduction_param {{ {params} }}'


def data(shape, seed=0):
    """Values away from 0 so ASUM's kink is never crossed by a finite difference."""
    rng = np.random.default_rng(seed)
    magnitude = rng.uniform(0.2, 1.0, shape)
    return (magnitude * rng.choice([-1, 1], shape)).astype(np.float32)


def with_zeros(x):
    """Every 7th value 0: ASUM's sign(0) = 0."""
    x.flat[::7] = 0
    return x


# (shape, axis, coeff). GPU: fewer cases (the simulator runs each block's barriers slowly),
# with rows longer than the (test-sized) thread block.
GPU_CASES = [(SHAPE, 0, None), (SHAPE, 1, -2.5), (SHAPE, -1, 0.5), ((2, 45, 3), 1, None)]
FORWARD_CASES = [(SHAPE, axis, coeff) for coeff in (None, -2.5) for axis in (0, 1, 2, -1, -2)]
BACKWARD_CASES = [(SHAPE, axis, 3) for axis in (0, 1, 2)]


def op_cases(cases):
    return [(op,) + case for case in cases for op in OPS]


@pytest.mark.parametrize("engine, op, shape, axis, coeff", engine_cases(
    op_cases(FORWARD_CASES + GPU_CASES), op_cases(GPU_CASES), unpack=True), indirect=["engine"])
def test_forward(engine, op, shape, axis, coeff):
    x = with_zeros(data(shape))
    params = f"operation: {op} axis: {axis}" + (f" coeff: {coeff}" if coeff else "")
    layer, bottom, top = set_up(reduction(params), [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    axis %= len(shape)
    assert top[0].shape == shape[:axis]
    rows = x.reshape(int(np.prod(shape[:axis])), -1).astype(np.float64)
    expected = OPS[op](rows).reshape(shape[:axis]) * (coeff or 1)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-6)


def test_defaults_sum_everything_to_a_scalar(engine):
    x = data(SHAPE)
    layer, bottom, top = set_up('name: "red" type: "Reduction"', [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    assert top[0].shape == ()
    # a sum of signed terms: atol is rtol times the data's scale, the largest term
    np.testing.assert_allclose(top[0].data, x.sum(dtype=np.float64), rtol=1e-5,
                               atol=1e-5 * np.abs(x).max())


@pytest.mark.parametrize("engine, op, shape, axis, coeff", engine_cases(
    op_cases(BACKWARD_CASES + GPU_CASES), op_cases(GPU_CASES), unpack=True),
    indirect=["engine"])
def test_backward(engine, op, shape, axis, coeff):
    x = with_zeros(data(shape))
    params = f"operation: {op} axis: {axis}" + (f" coeff: {coeff}" if coeff else "")
    layer, bottom, top = set_up(reduction(params), [x])
    layer.forward(bottom, top)
    dy = data(top[0].shape, seed=1)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    axis %= len(shape)
    dim = int(np.prod(shape[axis:]))
    scale = (coeff or 1) * dy.reshape(dy.shape + (1,) * (len(shape) - axis))
    expected = {"SUM": np.broadcast_to(scale, shape), "MEAN": np.broadcast_to(scale / dim, shape),
                "ASUM": scale * np.sign(x), "SUMSQ": 2 * scale * x}[op]
    np.testing.assert_allclose(bottom[0].cpu_diff, expected, rtol=1e-5, atol=1e-6)


# GPU: one row (the simulator runs each block's barriers slowly), the default axis (0), and
# the backward passes that read x.
@pytest.mark.parametrize("engine, op, axis, shape", engine_cases(
    [(op, axis, SHAPE) for axis in (0, 1, 2) for op in OPS],
    [(op, None, (2, 3)) for op in ("ASUM", "SUMSQ")], unpack=True), indirect=["engine"])
def test_gradient(engine, op, axis, shape):
    params = f"operation: {op}" + (f" axis: {axis}" if axis is not None else "")
    layer, bottom, top = set_up(reduction(f"{params} coeff: 0.5"), [data(shape)])
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top)


def test_asum_gradient_is_zero_at_zero(engine):
    layer, bottom, top = set_up(reduction("operation: ASUM"), [np.array([0.0, 1.0, -2.0])])
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].cpu_diff, [0, 1, -1])


def test_bad_axis_names_the_layer():
    with pytest.raises(CaffeError, match='"red".*axis 3 out of range'):
        set_up(reduction("axis: 3"), [data(SHAPE)])
