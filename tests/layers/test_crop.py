"""Crop: axis and offset variants against numpy slicing, zero-padded backward, gradients,
errors; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import set_up

SOURCE = (2, 4, 5, 6)


def crop(params=""):
    return f'name: "crop" type: "Crop" crop_param {{ {params} }}'


def data(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


CASES = [  # params, reference shape, slices into the source
    ("", (1, 1, 3, 4), np.s_[:, :, 0:3, 0:4]),
    ("offset: 1", (1, 1, 3, 4), np.s_[:, :, 1:4, 1:5]),
    ("offset: 2 offset: 1", (1, 1, 3, 4), np.s_[:, :, 2:5, 1:5]),
    ("axis: 1 offset: 1", (1, 2, 3, 4), np.s_[:, 1:3, 1:4, 1:5]),
    ("axis: 1 offset: 2 offset: 0 offset: 2", (1, 2, 3, 4), np.s_[:, 2:4, 0:3, 2:6]),
    ("axis: 0 offset: 1 offset: 0 offset: 1 offset: 2", (1, 3, 3, 4),
     np.s_[1:2, 0:3, 1:4, 2:6]),
    ("axis: -1 offset: 2", (7, 7, 7, 3), np.s_[:, :, :, 2:5]),
    ("axis: 2 offset: 0", (1, 1, 5, 6), np.s_[:, :, :, :]),
]


@pytest.mark.parametrize("params, reference, where", CASES)
def test_forward(params, reference, where, engine):
    x = data(SOURCE)
    layer, bottom, top = set_up(crop(params), [x, np.zeros(reference)])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    np.testing.assert_array_equal(top[0].cpu_data, x[where])


@pytest.mark.parametrize("params, reference, where", CASES)
def test_backward_pads_zeros(params, reference, where, engine):
    x = data(SOURCE)
    layer, bottom, top = set_up(crop(params), [x, np.zeros(reference)])
    layer.forward(bottom, top)
    dy = data(top[0].shape, seed=1)
    top[0].diff[...] = dy
    bottom[0].diff[...] = 9
    layer.backward(top, [True, False], bottom)
    expected = np.zeros(SOURCE, np.float32)
    expected[where] = dy
    np.testing.assert_array_equal(bottom[0].cpu_diff, expected)


WHOLE_SOURCE = [(params, SOURCE, reference) for params, reference, _ in CASES]


@pytest.mark.parametrize("engine, params, shape, reference", engine_cases(
    [("offset: 1", (2, 2, 4, 4), (1, 1, 2, 3))] + WHOLE_SOURCE,
    [("axis: 1 offset: 1", (2, 3, 4, 4), (1, 1, 2, 3))] + WHOLE_SOURCE, unpack=True),
    indirect=["engine"])
def test_gradient(engine, params, shape, reference):
    layer, bottom, top = set_up(crop(params), [data(shape), np.zeros(reference)])
    if engine == "gpu":
        assert layer.backward_gpu is not None
    check_gradient(layer, bottom, top, check_bottom=[0])


def test_reference_never_gets_a_gradient():
    layer, _, _ = set_up(crop(), [data(SOURCE), np.zeros((1, 1, 2, 2))])
    assert layer.allow_force_backward(0) and not layer.allow_force_backward(1)


def test_reshape_follows_the_reference():
    layer, bottom, top = set_up(crop("offset: 1"), [data(SOURCE), np.zeros((1, 1, 3, 4))])
    bottom[1].reshape((1, 1, 2, 2))
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, bottom[0].data[:, :, 1:3, 1:3])


@pytest.mark.parametrize("params, reference, message", [
    ("offset: 3", (1, 1, 3, 4), "crop for dimension 2 is out-of-bounds"),
    ("", (1, 1, 6, 4), "crop for dimension 2 is out-of-bounds"),
    ("offset: 1 offset: 1 offset: 1", (1, 1, 3, 4), "number of offset values"),
    ("axis: 4", (1, 1, 3, 4), "axis 4 out of range"),
    ("", (1, 1, 3), "fewer axes"),
])
def test_errors_name_the_layer(params, reference, message):
    with pytest.raises(CaffeError, match=f'"crop".*{message}'):
        set_up(crop(params), [data(SOURCE), np.zeros(reference)])
