"""Permute layer (SSD's fork): forward and backward against an element-by-element reference,
the identity order sharing memory, gradients, GPU against CPU, user errors."""
import itertools

import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, compare_layer_modes
from tests.layer_helpers import blob_of, layer_param, set_up


def permute(*order):
    orders = " ".join(f"order: {axis}" for axis in order)
    return f'name: "perm" type: "Permute" permute_param {{ {orders} }}'


def counting(shape):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape) * 0.5 - 3


def reference(x, full_order):
    """top[t] = x[b] with b[full_order[i]] = t[i], element by element."""
    top = np.empty([x.shape[axis] for axis in full_order], np.float32)
    for t in itertools.product(*(range(n) for n in top.shape)):
        b = [0] * x.ndim
        for i, axis in enumerate(full_order):
            b[axis] = t[i]
        top[t] = x[tuple(b)]
    return top


CASES = [  # (order given, the full order, bottom shape)
    ((0, 2, 3, 1), (0, 2, 3, 1), (2, 3, 4, 5)),     # SSD's mbox_loc / mbox_conf permute
    ((3, 2, 1, 0), (3, 2, 1, 0), (2, 3, 4, 5)),
    ((1,), (1, 0, 2), (2, 3, 4)),                   # unlisted axes follow in their order
    ((2, 0), (2, 0, 1, 3), (2, 3, 4, 2)),
    ((1, 0), (1, 0), (3, 5)),
]


@pytest.mark.parametrize("order, full, shape", CASES)
def test_forward_and_backward_match_the_reference(order, full, shape, engine):
    x = counting(shape)
    layer, bottom, top = set_up(permute(*order), [x])
    assert top[0].shape == tuple(shape[axis] for axis in full)
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    want = reference(x, full)
    np.testing.assert_array_equal(top[0].cpu_data, want)
    # backward: the top diff goes back to where each value came from
    dy = -counting(top[0].shape)
    top[0].diff[...] = dy
    bottom[0].diff[...] = 99
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(reference(bottom[0].cpu_diff, full), dy)


@pytest.mark.parametrize("order", [(), (0, 1, 2), (0,), (0, 1)])
def test_the_identity_order_shares_data_and_diff(order, engine):
    x = counting((2, 3, 4))
    layer, bottom, top = set_up(permute(*order), [x])
    assert top[0].shape == x.shape
    assert top[0].shares_data_with(bottom[0])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].cpu_data, x)
    top[0].diff[...] = 5
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].cpu_diff, 5)


def test_backward_respects_propagate_down():
    layer, bottom, top = set_up(permute(0, 2, 1), [counting((1, 2, 3))])
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    bottom[0].diff[...] = 7
    layer.backward(top, [False], bottom)
    np.testing.assert_array_equal(bottom[0].diff, 7)


def test_reshape_follows_a_new_input_shape():
    layer, bottom, top = set_up(permute(0, 2, 3, 1), [counting((1, 2, 2, 2))])
    x = counting((2, 3, 1, 4))
    layer.forward([blob_of(x)], top)
    np.testing.assert_array_equal(top[0].data, reference(x, (0, 2, 3, 1)))


@pytest.mark.parametrize("order", [(0, 2, 3, 1), (2, 1)])
def test_gradient(order):
    x = np.random.default_rng(3).normal(size=(2, 3, 2, 2)).astype(np.float32)
    layer, bottom, top = set_up(permute(*order), [x])
    check_gradient(layer, bottom, top, mode="exhaustive")


@pytest.mark.parametrize("order, shape", [((0, 2, 3, 1), (2, 3, 2, 3)), ((2, 0, 1), (3, 2, 4)),
                                          ((1, 0), (3, 4))])
def test_gpu_matches_cpu(order, shape):
    rng = np.random.default_rng(11)
    x = rng.normal(size=shape).astype(np.float32)
    top_shape = tuple(shape[axis] for axis in order) + tuple(
        n for axis, n in enumerate(shape) if axis not in order)
    compare_layer_modes(permute(*order), [x],
                        top_diffs=[rng.normal(size=top_shape).astype(np.float32)],
                        rtol=0, atol=0)   # a copy: exact


@pytest.mark.parametrize("order, shape, message", [
    ((0, 4, 1), (1, 2, 3, 4), r"order 4 is out of range for a bottom of 4 axes"),
    ((3,), (2, 3, 4), r"order 3 is out of range for a bottom of 3 axes"),
    ((0, 2, 2, 1), (1, 2, 3, 4), r"order \[0, 2, 2, 1\] lists an axis more than once"),
])
def test_user_errors_name_the_layer(order, shape, message):
    with pytest.raises(CaffeError, match=f'layer "perm".*{message}'):
        set_up(permute(*order), [np.zeros(shape)])


def test_in_place_is_an_error():
    layer = create_layer(layer_param(permute(0, 2, 1)))
    blob = blob_of(np.zeros((1, 3, 2)))
    with pytest.raises(CaffeError, match='"perm".*in-place'):
        layer.setup([blob], [blob])
