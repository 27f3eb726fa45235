"""Embed: lookup (fractional indices truncated) and accumulated weight / bias gradients against
numpy, no index gradient, errors; on both engines, and the GPU's handling of an index only the
device saw."""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import set_up
from tests.numerics import close_to

FILLERS = ('weight_filler { type: "uniform" min: -1 max: 1 } '
           'bias_filler { type: "uniform" min: -1 max: 1 } ')


def embed(params):
    return f'name: "embed" type: "Embed" embed_param {{ {FILLERS}{params} }}'


def indices(shape, input_dim, seed=0):
    return np.random.default_rng(seed).integers(0, input_dim, shape).astype(np.float32)


# (shape, input_dim)
CPU_SHAPES = [((6,), 5), ((2, 3), 5), ((2, 1, 3), 5)]
GPU_SHAPES = [((6,), 5), ((2, 7), 3), ((3, 1, 4), 20)]


@pytest.mark.parametrize("engine, shape, input_dim", engine_cases(
    CPU_SHAPES + GPU_SHAPES[1:], GPU_SHAPES, unpack=True), indirect=["engine"])
@pytest.mark.parametrize("bias_term", [True, False])
def test_forward_backward(engine, shape, input_dim, bias_term):
    backend.set_random_seed(0)
    x = indices(shape, input_dim)
    x.flat[::3] += 0.75  # truncated toward zero, as static_cast
    text = embed(f"num_output: 4 input_dim: {input_dim} bias_term: {str(bias_term).lower()}")
    layer, bottom, top = set_up(text, [x])
    assert [b.shape for b in layer.blobs] == [(input_dim, 4)] + ([(4,)] if bias_term else [])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    rows = x.astype(int).ravel()
    weight = layer.blobs[0].cpu_data.copy()
    expected = weight[rows].reshape(shape + (4,))
    if bias_term:
        expected = expected + layer.blobs[1].cpu_data
    assert top[0].shape == shape + (4,)
    close_to(top[0].cpu_data, expected, rtol=1e-6)
    # the weight gradient sums dy over each row's occurrences; the bias's over all
    dy = np.random.default_rng(5).normal(size=shape + (4,)).astype(np.float32)
    top[0].diff[...] = dy
    for blob in layer.blobs:
        blob.diff[...] = 0
    layer.backward(top, [False], bottom)
    expected_diff = np.zeros((input_dim, 4))
    np.add.at(expected_diff, rows, dy.reshape(-1, 4))
    np.testing.assert_allclose(layer.blobs[0].cpu_diff, expected_diff, rtol=1e-6, atol=1e-6)
    if bias_term:
        np.testing.assert_allclose(layer.blobs[1].cpu_diff, dy.reshape(-1, 4).sum(axis=0),
                                   rtol=1e-6, atol=1e-6)


def test_backward_accumulates_repeated_indices(engine):
    backend.set_random_seed(0)
    x = np.array([[1, 3, 1], [0, 1, 3]], np.float32)
    layer, bottom, top = set_up(embed("num_output: 2 input_dim: 4"), [x])
    layer.forward(bottom, top)
    dy = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    top[0].diff[...] = dy
    for blob in layer.blobs:
        blob.diff[...] = 1
    layer.backward(top, [False], bottom)
    expected = np.ones((4, 2), np.float32)
    for index, grad in zip(x.ravel().astype(int), dy.reshape(-1, 2)):
        expected[index] += grad
    np.testing.assert_array_equal(layer.blobs[0].diff, expected)
    np.testing.assert_array_equal(layer.blobs[1].diff, 1 + dy.reshape(-1, 2).sum(axis=0))


@pytest.mark.parametrize("bias_term", [True, False])
def test_gradient(bias_term, engine):
    backend.set_random_seed(0)
    layer, bottom, top = set_up(embed(f"num_output: 3 input_dim: 5 "
                                      f"bias_term: {str(bias_term).lower()}"),
                                [indices((2, 4), 5)])
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top, check_bottom=[])


def test_no_gradient_to_the_indices(engine):
    layer, bottom, top = set_up(embed("num_output: 2 input_dim: 3"), [indices((4,), 3)])
    assert not layer.allow_force_backward(0)
    layer.forward(bottom, top)
    with pytest.raises(CaffeError, match='"embed".*Can\'t backpropagate'):
        layer.backward(top, [True], bottom)


@pytest.mark.parametrize("value", [-1, 3, 7.5])
def test_out_of_range_index_names_the_layer(value, engine):
    layer, bottom, top = set_up(embed("num_output: 2 input_dim: 3"), [np.array([0, value])])
    with pytest.raises(CaffeError, match='"embed".*out of range for input_dim 3'):
        layer.forward(bottom, top)


def test_given_blobs_are_used():
    text = (embed("num_output: 2 input_dim: 2 bias_term: false")
            + " blobs { shape { dim: 2 dim: 2 } data: 1 data: 2 data: 3 data: 4 }")
    layer, bottom, top = set_up(text, [np.array([1, 0, 1])])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, [[3, 4], [1, 2], [3, 4]])


@pytest.mark.parametrize("params, message", [
    ("input_dim: 3", "num_output must be positive"),
    ("num_output: 3", "input_dim must be positive"),
])
def test_bad_params_name_the_layer(params, message):
    with pytest.raises(CaffeError, match=f'"embed".*{message}'):
        set_up(embed(params), [np.zeros(3)])


def test_wrong_given_blobs_name_the_layer():
    text = embed("num_output: 2 input_dim: 2") + " blobs { shape { dim: 3 } }"
    with pytest.raises(CaffeError, match='"embed".*given blobs'):
        set_up(text, [np.zeros(3)])


# --- GPU mode ------------------------------------------------------------------------------
def test_gpu_index_made_on_the_device_is_not_read_back(gpu_mode):
    """An out-of-range index the host never saw gives the bias row and no weight gradient."""
    backend.set_random_seed(0)
    layer, bottom, top = set_up(embed("num_output: 2 input_dim: 3"), [np.zeros(3)])
    bottom[0].mutable_gpu_data.copy_to_device(np.array([2, 7, -1], np.float32))
    layer.forward(bottom, top)
    weight, bias = layer.blobs[0].cpu_data, layer.blobs[1].cpu_data
    np.testing.assert_allclose(top[0].cpu_data, [weight[2] + bias, bias, bias])
    top[0].diff[...] = 1
    layer.backward(top, [False], bottom)
    np.testing.assert_array_equal(layer.blobs[0].cpu_diff, [[0, 0], [0, 0], [1, 1]])
