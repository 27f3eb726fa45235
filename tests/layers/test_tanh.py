"""TanH: forward against numpy, gradients, in-place use, saturation; the GPU path against the
CPU's."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import compare_layer_modes, engine_cases
from tests.layer_helpers import assert_in_place_matches, set_up

TANH = 'name: "tanh" type: "TanH"'
SHAPES = [(2, 3, 4, 5), (7,), (3, 6)]


@pytest.mark.parametrize("shape", SHAPES)
def test_forward(shape):
    x = np.random.default_rng(0).normal(scale=2, size=shape)
    layer, bottom, top = set_up(TANH, [x])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, np.tanh(x.astype(np.float32).astype(np.float64)),
                               rtol=1e-6, atol=1e-7)


def test_extreme_inputs_saturate(engine):
    layer, bottom, top = set_up(TANH, [np.array([-1e4, 0.0, 1e4])])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].cpu_data, [-1, 0, 1])


@pytest.mark.parametrize("engine, shape", engine_cases(SHAPES, [(2, 3, 4)]), indirect=["engine"])
def test_gradient(engine, shape):
    x = np.random.default_rng(1).normal(size=shape)
    layer, bottom, top = set_up(TANH, [x])
    check_gradient(layer, bottom, top)


def test_in_place(engine):
    x = np.random.default_rng(2).normal(size=(3, 4))
    dy = np.random.default_rng(3).normal(size=(3, 4))
    assert_in_place_matches([TANH], x, dy)


def test_needs_one_bottom():
    with pytest.raises(CaffeError, match='"tanh".*exactly 1 bottom'):
        set_up(TANH, [])


# --- GPU mode ---------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES)
def test_gpu_matches_cpu(shape):
    rng = np.random.default_rng(4)
    x = rng.normal(scale=2, size=shape)
    compare_layer_modes(TANH, [x], top_diffs=[rng.normal(size=shape)])
