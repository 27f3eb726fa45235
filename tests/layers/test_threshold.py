"""Threshold: forward against numpy (strictly greater), in-place use, and the missing
backward raising a CaffeError; on both engines."""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer, v1_type_name
from tests.gpu_helpers import assert_tops_on_device
from tests.layer_helpers import blob_of, layer_param, set_up

SHAPES = [(2, 3, 4, 5), (7,), (3, 6)]
THRESHOLDS = [0.0, 0.3, -0.5]


def threshold(t=None):
    param = f" threshold_param {{ threshold: {t} }}" if t is not None else ""
    return f'name: "step" type: "Threshold"{param}'


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("t", THRESHOLDS)
def test_forward(shape, t, engine):
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    x.flat[0] = t  # equal to the threshold: 0
    layer, bottom, top = set_up(threshold(t), [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    np.testing.assert_array_equal(top[0].cpu_data, (x > np.float32(t)).astype(np.float32))
    assert top[0].cpu_data.flat[0] == 0


def test_default_threshold_is_zero():
    layer, bottom, top = set_up(threshold(), [np.array([-1.0, 0.0, 1e-6])])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, [0, 0, 1])


def test_in_place(engine):
    blob = blob_of([0.1, 0.5, 0.9])
    layer = create_layer(layer_param(threshold(0.5)))
    layer.setup([blob], [blob])
    layer.forward([blob], [blob])
    np.testing.assert_array_equal(blob.cpu_data, [0, 0, 1])


@pytest.fixture
def fallback_notices(caplog, monkeypatch):
    """A function giving the "no GPU ... pass; running it on the CPU" notices logged so far
    in the test (the once-per-process record of them cleared first)."""
    monkeypatch.setitem(backend._state, "logged", set())
    return lambda: [r.getMessage() for r in caplog.records if "no GPU" in r.getMessage()]


def test_backward_is_not_implemented(engine, fallback_notices):
    layer, bottom, top = set_up(threshold(), [np.ones(3)])
    layer.forward(bottom, top)
    with pytest.raises(CaffeError, match='"step".*no backward'):
        layer.backward(top, [True], bottom)
    assert fallback_notices() == []


def test_backward_without_propagate_down_is_a_no_op(engine, fallback_notices):
    layer, bottom, top = set_up(threshold(), [np.ones(3)])
    layer.forward(bottom, top)
    bottom[0].diff[...] = 4
    layer.backward(top, [False], bottom)
    np.testing.assert_array_equal(bottom[0].cpu_diff, [4, 4, 4])
    assert fallback_notices() == []


def test_v1_name():
    assert v1_type_name("THRESHOLD") == "Threshold"


def test_force_backward_does_not_reach_the_bottom():
    layer = create_layer(layer_param(threshold()))
    assert layer.allow_force_backward(0) is False
