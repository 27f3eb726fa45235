"""Silence: no tops; backward zeroes the diffs of the bottoms that need a gradient."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import compare_layer_modes
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


# --- GPU mode ------------------------------------------------------------------------------
def test_gpu_matches_cpu():
    xs = [np.random.default_rng(i).normal(size=s) for i, s in enumerate([(2, 3), (4,)])]
    compare_layer_modes(SILENCE, xs, 0, top_diffs=[], propagate_down=[True, False])


def test_gpu_backward_zeroes_on_the_device(gpu_mode):
    layer, bottom, top = set_up(SILENCE, [np.ones((2, 3)), np.ones(4)], 0)
    layer.forward(bottom, top)
    for blob in bottom:
        blob.diff[...] = 7
    layer.backward(top, [True, False], bottom)
    assert layer.backward_gpu is not None
    np.testing.assert_array_equal(bottom[0].cpu_diff, 0)
    np.testing.assert_array_equal(bottom[1].cpu_diff, 7)


def test_gpu_gradient(gpu_mode):
    layer, bottom, top = set_up(SILENCE, [np.ones((2, 3))], 0)
    check_gradient(layer, bottom, top)
