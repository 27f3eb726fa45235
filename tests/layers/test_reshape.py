"""Reshape: Caffe's 0 (copy) / -1 (infer) / axis / num_axes rules; data and diff shared; on
both engines (the top is the bottom's memory under another shape: nothing is written).

The shape cases are those of Caffe's test_reshape_layer.cpp, on a (2, 3, 6, 5) bottom.
"""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import engine_cases
from tests.layer_helpers import blob_of, layer_param, set_up

BOTTOM_SHAPE = (2, 3, 6, 5)


def reshape(dims, extra=""):
    shape = " ".join(f"dim: {d}" for d in dims)
    return f'name: "rs" type: "Reshape" reshape_param {{ shape {{ {shape} }} {extra} }}'


def bottom_values(shape=BOTTOM_SHAPE, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


@pytest.mark.parametrize("dims, extra, expected", [
    ((0, -1, 1, 1), "", (2, 90, 1, 1)),                    # TestFlattenOutputSizes
    ((0, 0, 0, 0), "", (2, 3, 6, 5)),                      # TestCopyDimensions
    ((0, 3, 10, -1), "", (2, 3, 10, 3)),                   # TestInferenceOfUnspecified
    ((3, 10, -1), "axis: 1", (2, 3, 10, 3)),               # ...WithStartAxis
    ((1, 1, 1), "axis: 0 num_axes: 0", (1, 1, 1, 2, 3, 6, 5)),   # TestInsertSingletonAxesStart
    ((1, 1, 1), "axis: 2 num_axes: 0", (2, 3, 1, 1, 1, 6, 5)),   # ...Middle
    ((1, 1, 1), "axis: -1 num_axes: 0", (2, 3, 6, 5, 1, 1, 1)),  # ...End
    ((-1,), "axis: 1 num_axes: 2", (2, 18, 5)),            # TestFlattenMiddle
    ((6, 2, 3, 5), "", (6, 2, 3, 5)),                      # TestForward
    ((-1,), "", (180,)),
    ((-1,), "axis: -3", (2, 3, 30)),
    ((0, -1), "axis: -3", (2, 3, 6, 5)),  # 0 copies bottom axis 2, -1 infers 5
    ((), "axis: 1 num_axes: 0", (2, 3, 6, 5)),
    ((0, -1), "axis: 1 num_axes: 1", (2, 3, 1, 6, 5)),  # 0 copies bottom axis 1 (3)
    ((0, -1), "", (2, 90)),
])
def test_shapes_and_values(engine, dims, extra, expected):
    x = bottom_values()
    layer, bottom, top = set_up(reshape(dims, extra), [x])
    if engine == "gpu":
        assert layer.forward_gpu is not None
    layer.forward(bottom, top)
    assert top[0].shape == expected
    np.testing.assert_array_equal(top[0].cpu_data, x.reshape(expected))
    assert top[0].shares_data_with(bottom[0])


def test_forward_after_bottom_reshape(engine):
    """Caffe's TestForwardAfterReshape: a 1-D bottom of the same count still works."""
    layer, bottom, top = set_up(reshape((6, 2, 3, 5)), [bottom_values()])
    bottom[0].reshape((180,))
    bottom[0].data[...] = bottom_values((180,), seed=3)
    layer.forward(bottom, top)
    assert top[0].shape == (6, 2, 3, 5)
    np.testing.assert_array_equal(top[0].data.ravel(), bottom[0].data)


def test_inferred_dim_follows_batch_size(engine):
    layer, bottom, top = set_up(reshape((0, -1)), [bottom_values()])
    bottom[0].reshape((4, 3, 6, 5))
    layer.forward(bottom, top)
    assert top[0].shape == (4, 90)


@pytest.mark.parametrize("dims, extra", [((-1,), ""), ((0, -1), ""),
                                         ((-1,), "axis: 1 num_axes: 2")])
def test_backward_shares_diff(engine, dims, extra):
    layer, bottom, top = set_up(reshape(dims, extra), [bottom_values()])
    if engine == "gpu":
        assert layer.backward_gpu is not None
    layer.forward(bottom, top)
    dy = np.arange(180).reshape(top[0].shape)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].cpu_diff, dy.reshape(BOTTOM_SHAPE))


@pytest.mark.parametrize("engine, dims, shape", engine_cases(
    [((6, 2, 3, 5), BOTTOM_SHAPE)], [((3, -1), (2, 3))], unpack=True), indirect=["engine"])
def test_gradient(engine, dims, shape):
    layer, bottom, top = set_up(reshape(dims), [bottom_values(shape)])
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize("dims, extra, message", [
    ((-1, -1), "", "multiple -1"),
    ((0, -2), "", "negative dimension"),
    ((7, -1), "", "divisible"),
    ((5, 5), "", "count must match"),
    ((0, 0, 0, 0, 0), "", "no bottom axis 4 to copy"),
    ((1,), "axis: 5", "axis 5 out of range"),
    ((1,), "axis: -6", "axis -6 out of range"),
    ((-1,), "axis: 2 num_axes: 3", "out of range"),
    ((-1,), "num_axes: -2", "num_axes must be >= 0"),
])
def test_errors(dims, extra, message):
    with pytest.raises(CaffeError, match=f'"rs".*{message}'):
        set_up(reshape(dims, extra), [bottom_values()])


def test_in_place_is_refused():
    blob = blob_of(bottom_values())
    with pytest.raises(CaffeError, match='"rs".*in-place'):
        create_layer(layer_param(reshape((-1,)))).setup([blob], [blob])
