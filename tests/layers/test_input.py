"""Input: tops shaped from input_param.shape; no forward work (on both engines)."""
import numpy as np
import pytest

from pycaffe_cli.cuda import memory
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.synced_memory import Head
from tests.layer_helpers import set_up


def input_layer(shapes):
    body = " ".join("shape { " + " ".join(f"dim: {d}" for d in s) + " }" for s in shapes)
    return f'name: "data" type: "Input" input_param {{ {body} }}'


@pytest.mark.parametrize("shapes, num_tops, expected", [
    ([(2, 3, 4, 5)], 1, [(2, 3, 4, 5)]),
    ([(2, 3)], 3, [(2, 3)] * 3),
    ([(2, 3, 4), (2,)], 2, [(2, 3, 4), (2,)]),
    ([()], 1, [()]),
])
def test_top_shapes(shapes, num_tops, expected):
    layer, bottom, top = set_up(input_layer(shapes), [], num_tops)
    assert [t.shape for t in top] == expected


def test_no_shape_leaves_tops_alone():
    layer, bottom, top = set_up(input_layer([]), [], 2)
    assert [t.shape for t in top] == [(), ()]


def test_forward_and_reshape_keep_caller_data(engine):
    """Forward and backward do no work: the caller's data stays as and where it was (on the
    device in GPU mode)."""
    layer, bottom, top = set_up(input_layer([(2, 3), (4,)]), [], 2)
    if engine == "gpu":
        assert layer.forward_gpu is not None and layer.backward_gpu is not None
        memory.fill(top[0].mutable_gpu_data, 5)
        expected = np.full((2, 3), 5)
    else:
        top[0].data[...] = expected = np.arange(6).reshape(2, 3)
    layer.forward(bottom, top)
    layer.backward(top, [], bottom)
    if engine == "gpu":
        assert top[0].data_memory.head is Head.AT_GPU
    np.testing.assert_array_equal(top[0].cpu_data, expected)
    np.testing.assert_array_equal(top[1].cpu_data, np.zeros(4))
    top[0].reshape((4, 5))
    layer.reshape(bottom, top)
    assert top[0].shape == (4, 5)


def test_shape_count_must_match_tops():
    with pytest.raises(CaffeError, match='"data".*3 tops vs. 2 shapes'):
        set_up(input_layer([(1,), (2,)]), [], 3)


def test_takes_no_bottoms():
    with pytest.raises(CaffeError, match='"data".*exactly 0 bottom'):
        set_up(input_layer([(1,)]), [np.ones(2)], 1)
