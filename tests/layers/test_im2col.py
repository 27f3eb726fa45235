"""Im2col layer: shapes and values (Caffe's test_im2col_layer), forward and backward against
numpy (N-d too), gradients, errors; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import v1_type_name
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.kernels.test_im2col_kernels import reference_col2im, reference_im2col
from tests.layer_helpers import set_up


def im2col(params):
    return f'name: "im2col" type: "Im2col" convolution_param {{ {params} }}'


@pytest.fixture
def bottom():
    return np.random.default_rng(1701).normal(size=(2, 3, 6, 5))


def test_setup_and_top_left_block(bottom):
    layer, b, top = set_up(im2col("kernel_size: 3 stride: 2"), [bottom])
    assert top[0].shape == (2, 27, 2, 2)
    layer.forward(b, top)
    for c in range(27):
        assert top[0].data[0, c, 0, 0] == b[0].data[0, c // 9, (c // 3) % 3, c % 3]


def test_rectangular_kernel(bottom):
    layer, b, top = set_up(im2col("kernel_h: 5 kernel_w: 3 stride: 2"), [bottom])
    assert top[0].shape == (2, 45, 1, 2)
    layer.forward(b, top)
    for c in range(45):
        assert top[0].data[0, c, 0, 0] == b[0].data[0, c // 15, (c // 3) % 5, c % 3]


# (shape, params, (kernel, pad, stride, dilation))
GEOMETRIES = [
    ((2, 3, 6, 5), "kernel_size: 3 stride: 2 pad: 1 dilation: 2",
     ((3, 3), (1, 1), (2, 2), (2, 2))),
    ((2, 3, 6, 5), "kernel_h: 3 kernel_w: 2 pad_h: 1 stride_w: 2",
     ((3, 2), (1, 0), (1, 2), (1, 1))),
    ((2, 3, 6, 5), "kernel_size: 2 force_nd_im2col: true", ((2, 2), (0, 0), (1, 1), (1, 1))),
    ((2, 2, 4, 3, 5), "kernel_size: 2 pad: 1 stride: 2", ((2,) * 3, (1,) * 3, (2,) * 3,
                                                          (1,) * 3)),
    ((2, 3, 7), "kernel_size: 3 dilation: 2", ((3,), (0,), (1,), (2,))),
]
MORE_GEOMETRIES = [
    ((2, 3, 6, 5), "kernel_size: 3 stride: 2", ((3, 3), (0, 0), (2, 2), (1, 1))),
    ((2, 3, 6, 5), "kernel_h: 2 kernel_w: 3 pad: 1", ((2, 3), (1, 1), (1, 1), (1, 1))),
    ((2, 3, 6, 5), "kernel_size: 2 dilation: 2 stride: 1 pad: 1",
     ((2, 2), (1, 1), (1, 1), (2, 2))),
]


# The GPU runs 2-d windows only (N-d ones take the CPU path).
@pytest.mark.parametrize("engine, shape, params, geometry", engine_cases(
    GEOMETRIES + MORE_GEOMETRIES, GEOMETRIES[:2] + MORE_GEOMETRIES, unpack=True),
    indirect=["engine"])
def test_forward_backward_match_numpy(engine, shape, params, geometry):
    """Forward: numpy's im2col, exactly; backward: its adjoint col2im."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=shape)
    layer, b, top = set_up(im2col(params), [x])
    layer.forward(b, top)
    assert_tops_on_device(layer, top)
    col = reference_im2col(b[0].cpu_data, *geometry)            # (C, *k, N, *out)
    axes = len(shape) - 2
    expected = np.moveaxis(col, 1 + axes, 0).reshape(top[0].shape)
    np.testing.assert_array_equal(top[0].cpu_data, expected)
    dy = rng.normal(size=top[0].shape).astype(np.float32)
    top[0].diff[...] = dy
    layer.backward(top, [True], b)
    dy_col = np.moveaxis(dy.reshape((shape[0],) + col.shape[:1 + axes] + col.shape[2 + axes:]),
                         0, 1 + axes)
    np.testing.assert_allclose(b[0].cpu_diff, reference_col2im(dy_col, shape, *geometry),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("engine, shape, params, seed", engine_cases(
    [(shape, params, 2) for shape, params, _ in GEOMETRIES],
    [((1, 3, 6, 5), "kernel_size: 3 pad: 1 stride: 2", 1701)], unpack=True),
    indirect=["engine"])
def test_gradient(engine, shape, params, seed):
    x = np.random.default_rng(seed).normal(size=shape)
    layer, b, top = set_up(im2col(params), [x])
    check_gradient(layer, b, top)


def test_exhaustive_gradient(bottom):
    layer, b, top = set_up(im2col("kernel_h: 5 kernel_w: 3 stride: 2"), [bottom[:1, :2]])
    check_gradient(layer, b, top, mode="exhaustive")


def test_channel_axis_2():
    x = np.random.default_rng(3).normal(size=(2, 3, 2, 5, 4))
    layer, b, top = set_up(im2col("kernel_size: 3 axis: 2"), [x])
    assert top[0].shape == (2, 3, 18, 3, 2)
    layer.forward(b, top)
    col = reference_im2col(b[0].data.reshape(6, 2, 5, 4), (3, 3), (0, 0), (1, 1), (1, 1))
    expected = np.moveaxis(col, 3, 0).reshape(top[0].shape)
    np.testing.assert_array_equal(top[0].data, expected)


@pytest.mark.parametrize("params, shape, message", [
    ("stride: 2", (2, 3, 6, 5), "kernel size must be specified"),
    ("kernel_size: 3 axis: 3", (2, 3, 6, 5), "at least one spatial axis"),
    ("kernel_size: 9", (2, 3, 6, 5), "does not fit"),
    ("kernel_size: 3 kernel_size: 2 kernel_size: 2", (2, 3, 6, 5), "once per spatial axis"),
])
def test_errors(params, shape, message):
    with pytest.raises(CaffeError, match=f'"im2col".*{message}'):
        set_up(im2col(params), [np.ones(shape)])


def test_v1_name():
    assert v1_type_name("IM2COL") == "Im2col"
    assert v1_type_name("DECONVOLUTION") == "Deconvolution"
