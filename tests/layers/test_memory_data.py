"""MemoryData: batches served from numpy arrays, wrapping around at the end."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from tests.layer_helpers import set_up


def memory_data(batch=2, c=3, h=2, w=4, extra=""):
    return (f'name: "mem" type: "MemoryData" top: "data" top: "label" '
            f'memory_data_param {{ batch_size: {batch} channels: {c} height: {h} width: {w} }} '
            f'{extra}')


def examples(n, item=(3, 2, 4), seed=0):
    data = np.random.default_rng(seed).normal(size=(n,) + item)
    return data, np.arange(n, dtype=np.float64) + 10


def test_setup_shapes():
    layer, bottom, top = set_up(memory_data(), [], 2)
    assert top[0].shape == (2, 3, 2, 4)
    assert top[1].shape == (2,)


def test_batches_wrap_around():
    layer, bottom, top = set_up(memory_data(), [], 2)
    data, labels = examples(6)
    layer.reset(data, labels)
    for step in range(7):  # 3 batches per pass: two passes and one more batch
        layer.forward(bottom, top)
        start = (2 * step) % 6
        np.testing.assert_array_equal(top[0].data, data[start:start + 2].astype(np.float32))
        np.testing.assert_array_equal(top[1].data, labels[start:start + 2])


def test_reset_starts_again_and_copies():
    layer, bottom, top = set_up(memory_data(), [], 2)
    data, labels = examples(4)
    layer.reset(data, labels)
    layer.forward(bottom, top)
    layer.reset(data, labels)
    data[...] = 0  # the layer holds its own copy
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[1].data, [10, 11])
    assert np.any(top[0].data != 0)


def test_labels_may_be_4d():
    layer, bottom, top = set_up(memory_data(), [], 2)
    data, labels = examples(2)
    layer.reset(data, labels.reshape(2, 1, 1, 1))
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[1].data, [10, 11])


def test_set_batch_size():
    layer, bottom, top = set_up(memory_data(), [], 2)
    data, labels = examples(6)
    layer.reset(data, labels)
    layer.forward(bottom, top)
    layer.set_batch_size(1)
    layer.forward(bottom, top)
    assert top[0].shape == (1, 3, 2, 4)
    np.testing.assert_array_equal(top[1].data, [12])
    with pytest.raises(CaffeError, match='"mem".*multiple of the batch size'):
        layer.set_batch_size(4)


def test_state_round_trip():
    layer, bottom, top = set_up(memory_data(), [], 2)
    layer.reset(*examples(6))
    layer.forward(bottom, top)
    state = layer.get_state()
    layer.forward(bottom, top)
    expected = top[1].data.copy()
    layer.set_state(state)
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[1].data, expected)


@pytest.mark.parametrize("n_data, n_labels, item, message", [
    (5, 5, (3, 2, 4), "multiple of the batch size"),
    (4, 3, (3, 2, 4), "one value per example"),
    (4, 4, (3, 4, 2), r"shape \(n, 3, 2, 4\)"),
    (0, 0, (3, 2, 4), "positive multiple"),
])
def test_reset_errors(n_data, n_labels, item, message):
    layer, bottom, top = set_up(memory_data(), [], 2)
    data = np.zeros((n_data,) + item)
    with pytest.raises(CaffeError, match=f'"mem".*{message}'):
        layer.reset(data, np.zeros(n_labels))


def test_forward_before_reset():
    layer, bottom, top = set_up(memory_data(), [], 2)
    with pytest.raises(CaffeError, match='"mem".*reset'):
        layer.forward(bottom, top)


@pytest.mark.parametrize("text", [memory_data(batch=0), memory_data(h=0),
                                  memory_data(extra="transform_param { scale: 0.5 }")])
def test_setup_errors(text):
    with pytest.raises(CaffeError, match='"mem"'):
        set_up(text, [], 2)


def test_needs_two_tops():
    with pytest.raises(CaffeError, match='"mem"'):
        set_up(memory_data(), [], 1)
