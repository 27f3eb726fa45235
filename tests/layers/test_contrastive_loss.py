"""ContrastiveLoss: loss and gradients against numpy (current and legacy forms, margins,
propagate_down patterns), hand-computed values, gradient checks away from the margin kink,
force_backward and errors; on both engines."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import set_up


def contrastive(margin=None, legacy=None, extra=""):
    fields = ([f"margin: {margin}"] if margin is not None else []) + (
        [f"legacy_version: {legacy}"] if legacy is not None else [])
    return (f'name: "loss" type: "ContrastiveLoss" '
            f'contrastive_loss_param {{ {" ".join(fields)} }} {extra}')


def reference(a, b, y, margin, legacy):
    """(loss, da) for loss weight 1 (db = -da); Caffe's 1e-4 guard in the current form."""
    a = a.astype(np.float32).astype(np.float64).reshape(a.shape[0], -1)
    b = b.astype(np.float32).astype(np.float64).reshape(a.shape)
    num = a.shape[0]
    d = a - b
    dist_sq = (d * d).sum(1)
    dist = np.sqrt(dist_sq)
    similar = y.ravel().astype(int) != 0
    if legacy:
        gap = margin - dist_sq
        dissimilar, factor = np.maximum(gap, 0), -1.0 * (gap > 0)
    else:
        gap = margin - dist
        dissimilar, factor = np.maximum(gap, 0) ** 2, -1.0 * (gap > 0) * gap / (dist + 1e-4)
    loss = np.where(similar, dist_sq, dissimilar).sum() / num / 2
    grad = np.where(similar, 1.0, factor)[:, None] * d / num
    return loss, grad


def pairs(num, channels, seed, margin=1.0, legacy=False, four_d=False):
    """Pairs whose distance (legacy: squared distance) stays well away from the margin; the
    first three are dissimilar inside the margin, dissimilar outside it, and similar."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (num, channels))
    direction = rng.normal(size=(num, channels))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    kink = np.sqrt(margin) if legacy else margin
    side = rng.integers(0, 2, num)
    side[:2] = [0, 1]
    length = np.where(side, kink + rng.uniform(0.3, 0.8, num),
                      kink * rng.uniform(0.2, 0.6, num))
    b = a + direction * length[:, None]
    y = rng.integers(0, 2, num).astype(float)
    y[:3] = [0, 0, 1]
    if four_d:
        return a.reshape(num, channels, 1, 1), b.reshape(num, channels, 1, 1), \
            y.reshape(num, 1, 1, 1)
    return a, b, y


CASES = [(5, 3, False), (4, 2, True), (6, 1, False)]


@pytest.mark.parametrize("num, channels, four_d", CASES)
@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("margin", [None, 2.0])
@pytest.mark.parametrize("down, top_diff", [([True, True, False], 1.0),
                                            ([False, True, False], 1.5)])
def test_forward_backward(num, channels, four_d, legacy, margin, down, top_diff, engine):
    """The gradients scale with the top's diff; a feature not propagated to keeps its diff."""
    m = 1.0 if margin is None else margin
    a, b, y = pairs(num, channels, 0, m, legacy, four_d)
    layer, bottom, top = set_up(contrastive(margin, str(legacy).lower()), [a, b, y])
    loss = layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    top[0].diff[...] = top_diff
    bottom[0].diff[...] = 7
    layer.backward(top, down, bottom)
    expected_loss, expected_grad = reference(a, b, y, m, legacy)
    expected_grad *= top_diff
    assert top[0].shape == ()
    np.testing.assert_allclose(top[0].cpu_data, expected_loss, rtol=1e-5)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-5)
    if down[0]:
        np.testing.assert_allclose(bottom[0].cpu_diff.reshape(num, -1), expected_grad,
                                   rtol=1e-5, atol=1e-7)
    else:
        np.testing.assert_array_equal(bottom[0].cpu_diff, 7)
    np.testing.assert_allclose(bottom[1].cpu_diff.reshape(num, -1), -expected_grad, rtol=1e-5,
                               atol=1e-7)


def test_default_is_current_version():
    a, b, y = pairs(4, 3, 1)
    layer, bottom, top = set_up(contrastive(), [a, b, y])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, reference(a, b, y, 1.0, False)[0], rtol=1e-5)


@pytest.mark.parametrize("legacy, expected", [
    # pairs: similar at distance 2 (d = 4); dissimilar at distance 0.5 (d = 0.25) and 3
    (False, (4 + (1.5 - 0.5) ** 2 + 0) / 3 / 2),
    (True, (4 + (1.5 - 0.25) + 0) / 3 / 2),
])
def test_hand_computed(legacy, expected, engine):
    a = np.zeros((3, 2))
    b = np.array([[2.0, 0.0], [0.0, 0.5], [3.0, 0.0]])
    layer, bottom, top = set_up(contrastive(1.5, str(legacy).lower()),
                                [a, b, np.array([1.0, 0.0, 0.0])])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-6)


def test_any_nonzero_integer_label_means_similar(engine):
    a, b, _ = pairs(3, 2, 2)
    layer, bottom, top = set_up(contrastive(), [a, b, np.array([2.0, 0.7, -1.0])])
    layer.forward(bottom, top)
    # int(0.7) == 0: dissimilar
    expected = reference(a, b, np.array([1.0, 0.0, 1.0]), 1.0, False)[0]
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-5)


@pytest.mark.parametrize("engine, num, channels, four_d, legacy, seed", engine_cases(
    [case + (legacy, 3) for legacy in (False, True) for case in CASES],
    [(4, 3, False, legacy, 6) for legacy in (False, True)]
    + [case + (legacy, 3) for legacy in (False, True) for case in CASES], unpack=True),
    indirect=["engine"])
def test_gradient(engine, num, channels, four_d, legacy, seed):
    a, b, y = pairs(num, channels, seed, 1.0, legacy, four_d)
    layer, bottom, top = set_up(contrastive(legacy=str(legacy).lower(), extra="loss_weight: 2"),
                                [a, b, y])
    check_gradient(layer, bottom, top, check_bottom=[0, 1])


def test_force_backward_reaches_both_features_only():
    layer, _, _ = set_up(contrastive(), list(pairs(3, 2, 4)))
    assert layer.allow_force_backward(0) and layer.allow_force_backward(1)
    assert not layer.allow_force_backward(2)


@pytest.mark.parametrize("shapes, message", [
    (((2, 3), (2, 4), (2,)), "same number of channels"),
    (((2, 3, 2, 1), (2, 3, 2, 1), (2,)), "first input must be N x C"),
    (((2, 3), (2, 3, 1, 2), (2,)), "second input must be N x C"),
    (((2, 3), (2, 3), (2, 2)), "one value per pair"),
    (((2, 3), (2, 3), (3,)), "one value per pair"),
    (((2, 3), (3, 3), (2,)), "first dimension"),
])
def test_shape_errors(shapes, message):
    with pytest.raises(CaffeError, match=f'"loss".*{message}'):
        set_up(contrastive(), [np.zeros(s) for s in shapes])


def test_needs_three_bottoms():
    with pytest.raises(CaffeError, match='"loss".*exactly 3 bottom'):
        set_up(contrastive(), [np.zeros((2, 2))] * 2)
