"""Silence: no tops; backward zeroes the diffs of the bottoms that need a gradient."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.layer_helpers import set_up

SILENCE = 'name: "quiet" type: "Silence"'


@pytest.mark.parametrize("shapes", [[(2, 3)], [(2, 3), (4,), (1, 2, 3, 4)]])
def test_forward_leaves_bottoms(shapes):
    xs = [np.random.default_rng(i).normal(size=s) for i, s in enumerate(shapes)]
    layer, bottom, top = set_up(SILENCE, xs, 0)
    assert layer.forward(bottom, top) == 0.0
    for blob, x in zip(bottom, xs):
        np.testing.assert_array_equal(blob.data, x.astype(np.float32))


def test_backward_zeroes_only_requested_diffs():
    layer, bottom, top = set_up(SILENCE, [np.ones((2, 3)), np.ones(4), np.ones(5)], 0)
    for blob in bottom:
        blob.diff[...] = 7
    layer.backward(top, [True, False, True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, 0)
    np.testing.assert_array_equal(bottom[1].diff, 7)
    np.testing.assert_array_equal(bottom[2].diff, 0)


def test_gradient_is_zero():
    layer, bottom, top = set_up(SILENCE, [np.random.default_rng(0).normal(size=(2, 3))], 0)
    check_gradient(layer, bottom, top)


def test_needs_a_bottom_and_no_top():
    with pytest.raises(CaffeError, match='"quiet"'):
        set_up(SILENCE, [], 0)
    with pytest.raises(CaffeError, match='"quiet"'):
        set_up(SILENCE, [np.ones(2)], 1)
