"""Bias: learnable and bottom forms over axis/num_axes, gradients, in place, errors."""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.synced_memory import Head
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import compare_layer_modes, engine_cases
from tests.layer_helpers import blob_of, broadcast, layer_param, set_up, uniform_data

SHAPE = (2, 3, 4, 5)


def bias(params=""):
    return f'name: "bias" type: "Bias" bias_param {{ {params} }}'


LEARNABLE = [  # params, expected blob shape, axis the blob starts at
    ("", (3,), 1),
    ("axis: 1 num_axes: 2", (3, 4), 1),
    ("axis: 0 num_axes: -1", SHAPE, 0),
    ("axis: 2 num_axes: -1", (4, 5), 2),
    ("axis: -1", (5,), 3),
    ("axis: -2 num_axes: 2", (4, 5), 2),
    ("num_axes: 0", (), 0),
    ("axis: 3 num_axes: 0", (), 0),
]

FILLED = 'filler { type: "uniform" min: -1 max: 1 } '


@pytest.mark.parametrize("params, blob_shape, axis", LEARNABLE)
def test_learnable_forward(params, blob_shape, axis):
    backend.set_random_seed(0)
    x = uniform_data(SHAPE)
    layer, bottom, top = set_up(bias(FILLED + params), [x])
    assert layer.blobs[0].shape == blob_shape
    layer.forward(bottom, top)
    expected = x + broadcast(layer.blobs[0].data, x.ndim, axis)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-6)


def test_default_filler_is_zero():
    layer, bottom, top = set_up(bias(), [uniform_data(SHAPE)])
    assert np.all(layer.blobs[0].data == 0)


BOTTOM_FORM = [  # params, bias shape, axis it lines up with
    ("", (3,), 1),
    ("axis: 0", (2, 3), 0),
    ("axis: 1", (3, 4, 5), 1),
    ("axis: -1", (5,), 3),
    ("axis: 0", SHAPE, 0),
    ("axis: 2", (), 0),
]


@pytest.mark.parametrize("params, bias_shape, axis", BOTTOM_FORM)
def test_bottom_form_forward(params, bias_shape, axis):
    x, b = uniform_data(SHAPE), uniform_data(bias_shape, seed=1)
    layer, bottom, top = set_up(bias(params), [x, b])
    assert layer.blobs == []
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, x + broadcast(b, x.ndim, axis), rtol=1e-6)


@pytest.mark.parametrize("engine, params, blob_shape, axis",
                         engine_cases(LEARNABLE, LEARNABLE[:1], unpack=True),
                         indirect=["engine"])
def test_learnable_gradient(engine, params, blob_shape, axis):
    backend.set_random_seed(0)
    layer, bottom, top = set_up(bias(FILLED + params), [uniform_data(SHAPE)])
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize("engine, params, bias_shape, axis",
                         engine_cases(BOTTOM_FORM, BOTTOM_FORM[:1], unpack=True),
                         indirect=["engine"])
def test_bottom_form_gradient(engine, params, bias_shape, axis):
    bottoms = [uniform_data(SHAPE), uniform_data(bias_shape, seed=1)]
    layer, bottom, top = set_up(bias(params), bottoms)
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top)


def test_param_gradient_accumulates_bottom_gradient_overwrites(engine):
    layer, bottom, top = set_up(bias(), [uniform_data((2, 3, 2))])
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    layer.blobs[0].diff[...] = 10
    layer.backward(top, [True], bottom)
    np.testing.assert_allclose(layer.blobs[0].cpu_diff, 14)
    np.testing.assert_allclose(bottom[0].cpu_diff, 1)

    layer, bottom, top = set_up(bias(), [uniform_data((2, 3, 2)), uniform_data((3,))])
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    bottom[1].diff[...] = 10
    layer.backward(top, [False, True], bottom)
    np.testing.assert_allclose(bottom[1].cpu_diff, 4)


def test_in_place():
    x, b = uniform_data(SHAPE), uniform_data((3,), seed=1)
    layer = create_layer(layer_param(bias()))
    blob, b_blob = blob_of(x), blob_of(b)
    layer.setup([blob, b_blob], [blob])
    layer.forward([blob, b_blob], [blob])
    np.testing.assert_allclose(blob.data, x + b.reshape(1, 3, 1, 1), rtol=1e-6)
    dy = uniform_data(SHAPE, seed=2)
    blob.diff[...] = dy
    layer.backward([blob], [True, True], [blob, b_blob])
    np.testing.assert_allclose(blob.diff, dy)
    np.testing.assert_allclose(b_blob.diff, dy.sum(axis=(0, 2, 3)), rtol=1e-5)


def test_given_blob_is_used():
    text = bias() + " blobs { shape { dim: 3 } data: 1 data: 2 data: 3 }"
    layer, bottom, top = set_up(text, [np.zeros((2, 3))])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, [[1, 2, 3], [1, 2, 3]])


@pytest.mark.parametrize("params, bottoms, message", [
    ("num_axes: -2", [SHAPE], "num_axes must be non-negative"),
    ("axis: 2 num_axes: 3", [SHAPE], "extends past"),
    ("axis: 4", [SHAPE], "axis 4 out of range"),
    ("", [SHAPE, (4,)], "dimension mismatch"),
    ("axis: 2", [SHAPE, (4, 5, 1)], "extends past"),
])
def test_errors_name_the_layer(params, bottoms, message):
    with pytest.raises(CaffeError, match=f'"bias".*{message}'):
        set_up(bias(params), [uniform_data(shape) for shape in bottoms])


# --- GPU mode ------------------------------------------------------------------------------
def _in_place_run(text, bottoms, top_diff, gpu):
    backend.set_random_seed(0)  # the same filled blobs in both runs
    layer = create_layer(layer_param(text))
    blobs = [blob_of(b) for b in bottoms]
    if gpu:
        backend.set_mode_gpu(0)
    try:
        layer.setup(blobs, [blobs[0]])
        layer.forward(blobs, [blobs[0]])
        head = blobs[0].data_memory.head
        y = blobs[0].cpu_data.copy()
        blobs[0].diff[...] = top_diff
        for blob in layer.blobs:
            blob.diff[...] = 0
        layer.backward([blobs[0]], [True] * len(blobs), blobs)
        grads = [b.cpu_diff.copy() for b in blobs + layer.blobs]
    finally:
        backend.set_mode_cpu()
    return head, y, grads


def compare_in_place(text, bottoms, top_diff, rtol=1e-5, atol=1e-6):
    """Run the layer in place (top is bottom[0]) in CPU and GPU mode; assert equal results
    and a top written on the device."""
    _, want_y, want_grads = _in_place_run(text, bottoms, top_diff, gpu=False)
    head, y, grads = _in_place_run(text, bottoms, top_diff, gpu=True)
    assert head is Head.AT_GPU
    np.testing.assert_allclose(y, want_y, rtol=rtol, atol=atol)
    for index, (want, got) in enumerate(zip(want_grads, grads)):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"grad {index}")


@pytest.mark.parametrize("params, blob_shape, axis", LEARNABLE)
def test_gpu_learnable_matches_cpu(params, blob_shape, axis):
    x, dy = uniform_data(SHAPE), uniform_data(SHAPE, seed=2)
    compare_layer_modes(bias(FILLED + params), [x], top_diffs=[dy], seed=0)


@pytest.mark.parametrize("params, bias_shape, axis", BOTTOM_FORM)
def test_gpu_bottom_form_matches_cpu(params, bias_shape, axis):
    x, b, dy = uniform_data(SHAPE), uniform_data(bias_shape, seed=1), uniform_data(SHAPE, 2)
    compare_layer_modes(bias(params), [x, b], top_diffs=[dy])
    compare_layer_modes(bias(params), [x, b], top_diffs=[dy], propagate_down=[False, True])


@pytest.mark.gpu
@pytest.mark.parametrize("params, bottoms", [(FILLED + "axis: 1 num_axes: 2", [SHAPE]),
                                             ("", [SHAPE, (3,)])])
def test_gpu_in_place(params, bottoms):
    xs = [uniform_data(shape, seed=i) for i, shape in enumerate(bottoms)]
    compare_in_place(bias(params), xs, uniform_data(SHAPE, seed=5))
