"""Accuracy: top-k with Caffe's tie rule, ignore_label, axis, per-class top, errors; on both
engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from tests.gpu_helpers import assert_tops_on_device
from tests.layer_helpers import no_ties, set_up
from tests.numerics import close_to


def accuracy(params=""):
    return f'name: "acc" type: "Accuracy" accuracy_param {{ {params} }}'


def reference(scores, labels, axis, top_k, ignore):
    """(accuracy, per-class accuracy) from the definition, one location at a time."""
    s = np.moveaxis(scores, axis, -1).reshape(-1, scores.shape[axis])
    hits, seen = np.zeros(s.shape[1]), np.zeros(s.shape[1])
    for row, label in zip(s, labels.astype(int).ravel()):
        if label == ignore:
            continue
        seen[label] += 1
        hits[label] += np.sum(np.delete(row, label) >= row[label]) < top_k
    total = hits.sum() / seen.sum() if seen.sum() else 0.0
    return total, np.where(seen > 0, hits / np.maximum(seen, 1), 0)


CASES = [  # shape, axis, top_k, ignore
    ((20, 10), 1, 1, None), ((20, 10), 1, 3, None), ((20, 10), 1, 3, 2),
    ((4, 5, 3, 2), 1, 1, None), ((4, 5, 3, 2), 1, 2, 0), ((3, 2, 6), 2, 3, None),
    ((3, 2, 6), -1, 1, 4), ((12, 10), 1, 10, None),
]


@pytest.mark.parametrize("shape, axis, top_k, ignore", CASES)
@pytest.mark.parametrize("num_tops", [1, 2])
def test_forward(shape, axis, top_k, ignore, num_tops, engine):
    rng = np.random.default_rng(0)
    canonical = axis % len(shape)
    scores = no_ties(rng, shape)
    labels = rng.integers(0, shape[canonical], shape[:canonical] + shape[canonical + 1:])
    params = f"axis: {axis} top_k: {top_k}"
    if ignore is not None:
        params += f" ignore_label: {ignore}"
    layer, bottom, top = set_up(accuracy(params), [scores, labels], num_tops=num_tops)
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    total, per_class = reference(scores, labels, canonical, top_k, ignore)
    assert top[0].shape == ()
    np.testing.assert_allclose(top[0].cpu_data, total, rtol=1e-6)
    if num_tops == 2:
        assert top[1].shape == (shape[canonical],)
        close_to(top[1].cpu_data, per_class, rtol=1e-6)
        if ignore is not None:
            assert top[1].cpu_data[ignore] == 0


def test_hand_computed_top1_and_top2(engine):
    scores = np.array([[0.1, 0.7, 0.2],   # label 1: top-1 hit
                       [0.5, 0.3, 0.2],   # label 2: ranked 3rd, miss even for top-2
                       [0.3, 0.4, 0.3]])  # label 0: ranked 2nd (tied), see tie rule below
    labels = np.array([1.0, 2.0, 0.0])
    layer, bottom, top = set_up(accuracy("top_k: 1"), [scores, labels], num_tops=2)
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, 1 / 3, rtol=1e-6)
    np.testing.assert_allclose(top[1].data, [0, 1, 0])
    layer, bottom, top = set_up(accuracy("top_k: 2"), [scores, labels])
    layer.forward(bottom, top)
    # row 3: classes 1 (0.4 > 0.3) and 2 (0.3 >= 0.3) both count as better -> miss
    np.testing.assert_allclose(top[0].data, 1 / 3, rtol=1e-6)


def test_ties_count_against_the_true_class(engine):
    scores = np.array([[0.5, 0.5, 0.0]])
    for label, top_k, expected in [(0, 1, 0.0), (1, 1, 0.0), (0, 2, 1.0), (2, 2, 0.0)]:
        layer, bottom, top = set_up(accuracy(f"top_k: {top_k}"),
                                    [scores, np.array([float(label)])])
        layer.forward(bottom, top)
        assert top[0].data == expected, (label, top_k)


def test_everything_ignored_gives_zero(engine):
    layer, bottom, top = set_up(accuracy("ignore_label: 1"),
                                [np.ones((3, 4)), np.ones(3)], num_tops=2)
    layer.forward(bottom, top)
    assert top[0].data == 0
    np.testing.assert_array_equal(top[1].data, 0)


def test_no_backward(engine):
    layer, bottom, top = set_up(accuracy(), [np.ones((2, 3)), np.zeros(2)])
    layer.forward(bottom, top)
    layer.backward(top, [False, False], bottom)
    with pytest.raises(CaffeError, match='"acc".*cannot backpropagate'):
        layer.backward(top, [True, False], bottom)
    assert not layer.allow_force_backward(0)


def test_label_out_of_range(engine):
    layer, bottom, top = set_up(accuracy(), [np.ones((2, 3)), np.array([0.0, 3.0])])
    with pytest.raises(CaffeError, match='"acc".*label value 3 is out of range'):
        layer.forward(bottom, top)


@pytest.mark.parametrize("params, shapes, message", [
    ("top_k: 4", ((2, 3), (2,)), "top_k"),
    ("", ((2, 3, 4), (2, 3)), "number of labels must match"),
    ("axis: 3", ((2, 3), (2,)), "axis 3"),
])
def test_reshape_errors(params, shapes, message):
    with pytest.raises(CaffeError, match=f'"acc".*{message}'):
        set_up(accuracy(params), [np.zeros(shapes[0]), np.zeros(shapes[1])])


@pytest.mark.parametrize("num_bottoms, num_tops, message", [
    (1, 1, "exactly 2 bottom"), (2, 0, "at least 1 top"), (2, 3, "at most 2 top")])
def test_blob_counts(num_bottoms, num_tops, message):
    with pytest.raises(CaffeError, match=f'"acc".*{message}'):
        set_up(accuracy(), [np.zeros((2, 3))] * num_bottoms, num_tops)
