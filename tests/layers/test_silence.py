"""Silence: no tops; backward zeroes the diffs of the bottoms that need a gradient; on both
engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.layer_helpers import set_up

SILENCE = 'name: "quiet" type: "Silence"'


@pytest.mark.parametrize("shapes", [[(2, 3)], [(2, 3), (4,), (1, 2, 3, 4)]])
def test_forward_leaves_bottoms(shapes, engine):
    xs = [np.random.default_rng(i).normal(size=s) for i, s in enumerate(shapes)]
    layer, bottom, top = set_up(SILENCE, xs, 0)
    assert layer.forward(bottom, top) == 0.0
    for blob, x in zip(bottom, xs):
        np.testing.assert_array_equal(blob.cpu_data, x.astype(np.float32))


@pytest.mark.parametrize("shapes, down", [([(2, 3), (4,), (5,)], [True, False, True]),
                                          ([(2, 3), (4,)], [True, False])])
def test_backward_zeroes_only_requested_diffs(shapes, down, engine):
    layer, bottom, top = set_up(SILENCE, [np.ones(shape) for shape in shapes], 0)
    layer.forward(bottom, top)
    for blob in bottom:
        blob.diff[...] = 7
    layer.backward(top, down, bottom)
    if engine == "gpu":
        assert layer.backward_gpu is not None
    for blob, zeroed in zip(bottom, down):
        np.testing.assert_array_equal(blob.cpu_diff, 0 if zeroed else 7)


def test_gradient_is_zero(engine):
    layer, bottom, top = set_up(SILENCE, [np.random.default_rng(0).normal(size=(2, 3))], 0)
    check_gradient(layer, bottom, top)


def test_needs_a_bottom_and_no_top():
    with pytest.raises(CaffeError, match='"quiet"'):
        set_up(SILENCE, [], 0)
    with pytest.raises(CaffeError, match='"quiet"'):
        set_up(SILENCE, [np.ones(2)], 1)
