"""HingeLoss: L1 and L2 loss and gradient against numpy (label sign flip, loss / num, a top diff
other than the loss weight), hand-computed values, gradient checks away from the hinge kinks,
and errors; on both engines."""
import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.layer_helpers import set_up


def hinge(norm=None, extra=""):
    param = f"hinge_loss_param {{ norm: {norm} }}" if norm else ""
    return f'name: "loss" type: "HingeLoss" {param} {extra}'


def reference(x, labels, norm):
    """(loss, dx) for loss weight 1, straight from the definition."""
    x = x.astype(np.float32).astype(np.float64).reshape(x.shape[0], -1)
    num = x.shape[0]
    sign = np.ones_like(x)
    sign[np.arange(num), labels.astype(int).ravel()] = -1
    margin = np.maximum(0, 1 + sign * x)
    if norm == "L2":
        return (margin ** 2).sum() / num, 2 * sign * margin / num
    return margin.sum() / num, sign * (margin > 0) / num


def away_from_kinks(rng, shape):
    """Scores whose margins 1 +- x stay at least 0.2 from zero, so no element sits on a kink."""
    x = rng.uniform(-2.5, 2.5, shape)
    near = np.abs(np.abs(x) - 1) < 0.2
    x[near] = np.sign(x[near]) * 0.5
    return x


CASES = [((4, 5), (4,)), ((3, 2, 2, 2), (3, 1, 1, 1)), ((6, 3), (6, 1))]


def case(shapes, seed):
    rng = np.random.default_rng(seed)
    x = away_from_kinks(rng, shapes[0])
    dim = int(np.prod(shapes[0][1:]))
    return x, rng.integers(0, dim, shapes[1]).astype(float)


# Layer.forward reads a weighted loss top back to the host (head SYNCED); with loss_weight 0
# the head stays AT_GPU and the top's diff, set by hand, is not the loss weight.
@pytest.mark.parametrize("engine, shapes, seed", engine_cases(
    [(shapes, 0) for shapes in CASES], [(shapes, 2) for shapes in CASES], unpack=True),
    indirect=["engine"])
@pytest.mark.parametrize("norm", [None, "L1", "L2"])
@pytest.mark.parametrize("weight, top_diff", [(None, 1), (0, 1.5)])
def test_forward_backward(engine, shapes, seed, norm, weight, top_diff):
    x, labels = case(shapes, seed)
    extra = "" if weight is None else f"loss_weight: {weight}"
    layer, bottom, top = set_up(hinge(norm, extra), [x, labels])
    loss = layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    top[0].diff[...] = top_diff
    bottom[1].diff[...] = 9
    layer.backward(top, [True, False], bottom)
    expected_loss, expected_grad = reference(x, labels, norm or "L1")
    assert top[0].shape == ()
    np.testing.assert_allclose(top[0].cpu_data, expected_loss, rtol=1e-5)
    np.testing.assert_allclose(loss, (1 if weight is None else weight) * expected_loss,
                               rtol=1e-5)
    np.testing.assert_allclose(bottom[0].cpu_diff.reshape(expected_grad.shape),
                               top_diff * expected_grad, rtol=1e-5, atol=1e-7)
    assert np.all(bottom[1].cpu_diff == 9)


@pytest.mark.parametrize("norm, expected", [("L1", (0.5 + 2.0 + 0.0) / 1),
                                            ("L2", (0.25 + 4.0 + 0.0) / 1)])
def test_hand_computed(norm, expected, engine):
    # label 1: margins 1 + (-0.5), 1 - (-1.0), 1 + (-3.0)
    layer, bottom, top = set_up(hinge(norm), [np.array([[-0.5, -1.0, -3.0]]), np.array([1.0])])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-6)


def test_gradient_is_zero_exactly_on_the_kink_for_l1(engine):
    # margin 1 + (-1) == 0: Caffe's sign(0) = 0
    layer, bottom, top = set_up(hinge("L1"), [np.array([[-1.0, 0.0]]), np.array([1.0])])
    layer.forward(bottom, top)
    layer.backward(top, [True, False], bottom)
    np.testing.assert_array_equal(bottom[0].diff, [[0.0, -1.0]])


@pytest.mark.parametrize("engine, shapes, norm, seed", engine_cases(
    [(shapes, norm, 1) for norm in ("L1", "L2") for shapes in CASES],
    [(((4, 3), (4,)), norm, 3) for norm in ("L1", "L2")], unpack=True), indirect=["engine"])
def test_gradient(engine, shapes, norm, seed):
    x, labels = case(shapes, seed)
    layer, bottom, top = set_up(hinge(norm, "loss_weight: 2"), [x, labels])
    check_gradient(layer, bottom, top, check_bottom=[0])


def test_cannot_backpropagate_to_labels(engine):
    layer, bottom, top = set_up(hinge(), [np.ones((2, 3)), np.zeros(2)])
    layer.forward(bottom, top)
    with pytest.raises(CaffeError, match='"loss".*cannot backpropagate to label inputs'):
        layer.backward(top, [True, True], bottom)


@pytest.mark.parametrize("label", [3.0, -1.0])
def test_label_out_of_range(label, engine):
    layer, bottom, top = set_up(hinge(), [np.ones((2, 3)), np.array([0.0, label])])
    with pytest.raises(CaffeError, match=f'"loss".*label value {int(label)} is out of range'):
        layer.forward(bottom, top)


@pytest.mark.parametrize("shapes, message", [
    (((2, 3), (2, 2)), "one label per item"),
    (((2, 3), (3,)), "first dimension"),
])
def test_shape_errors(shapes, message):
    with pytest.raises(CaffeError, match=f'"loss".*{message}'):
        set_up(hinge(), [np.zeros(shapes[0]), np.zeros(shapes[1])])


def test_bad_norm_is_a_parse_error():
    with pytest.raises(text_format.ParseError, match="L3"):
        set_up(hinge("L3"), [np.zeros((2, 3)), np.zeros(2)])
