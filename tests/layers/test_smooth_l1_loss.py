"""SmoothL1Loss in its three forks' forms (2, 3 and 4 bottoms) against a numpy reference,
its normalizers (R-FCN's loss_param, PRE_FIXED included), the per-instance top, gradients,
GPU vs CPU and user errors; and PRE_FIXED in BVLC's loss layers."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, compare_layer_modes
from tests.layer_helpers import set_up


def smooth_l1(extra=""):
    return f'name: "loss" type: "SmoothL1Loss" {extra}'


def inputs(shape, count, seed=1701, binary=False):
    """pred, target and count - 2 weight arrays (0/1 ones when ``binary``)."""
    rng = np.random.default_rng(seed)
    arrays = [rng.normal(size=shape).astype(np.float32) for _ in range(2)]
    for _ in range(count - 2):
        weights = rng.integers(0, 2, size=shape) if binary else rng.uniform(0, 2, size=shape)
        arrays.append(weights.astype(np.float32))
    return arrays


def reference(arrays, sigma=1.0):
    """(per-element errors, d(sum of errors)/d pred by each fork's rule), float64."""
    pred, target = (a.astype(np.float64) for a in arrays[:2])
    inside = arrays[2].astype(np.float64) if len(arrays) > 2 else 1.0
    outside = arrays[3].astype(np.float64) if len(arrays) > 3 else 1.0
    s2 = sigma * sigma
    d = inside * (pred - target)
    small = np.abs(d) < 1.0 / s2
    errors = outside * np.where(small, 0.5 * s2 * d * d, np.abs(d) - 0.5 / s2)
    slope = np.where(small, s2 * d, np.sign(d))
    # Fast R-CNN's 4-bottom form: the chain rule; SSD's and R-FCN's 3-bottom form: f'(d) only
    grad = slope * inside * outside if len(arrays) == 4 else slope
    return errors, grad


@pytest.mark.parametrize("count", [2, 3, 4])
@pytest.mark.parametrize("sigma, shape", [(1.0, (4, 8)), (3.0, (2, 3, 2, 2))])
def test_forward_and_backward_match_the_reference(count, sigma, shape, engine):
    arrays = inputs(shape, count)
    layer, bottom, top = set_up(smooth_l1(f"loss_weight: 2 smooth_l1_loss_param {{ sigma: "
                                          f"{sigma} }}"), arrays)
    assert top[0].shape == ()
    loss = layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    errors, grad = reference(arrays, sigma)
    num = shape[0]
    np.testing.assert_allclose(top[0].cpu_data, errors.sum() / num, rtol=1e-5)
    assert loss == pytest.approx(2 * errors.sum() / num, rel=1e-5)
    layer.backward(top, [True, True] + [False] * (count - 2), bottom)
    np.testing.assert_allclose(bottom[0].cpu_diff, 2 * grad / num, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(bottom[1].cpu_diff, -2 * grad / num, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("count, binary", [(2, False), (3, True), (4, False)])
def test_gradient(count, binary):
    arrays = inputs((3, 4), count, seed=5, binary=binary)
    arrays[0] *= 2   # both sides of |d| = 1
    layer, bottom, top = set_up(smooth_l1(), arrays)
    check_gradient(layer, bottom, top, check_bottom=[0, 1], mode="exhaustive")


@pytest.mark.parametrize("loss_param, divisor", [
    ("", 2),                                            # Fast R-CNN, SSD: num
    ("loss_param { normalization: VALID }", 2 * 6),     # R-FCN: num * height * width
    ("loss_param { normalization: FULL }", 2 * 6),
    ("loss_param { normalization: BATCH_SIZE }", 2),
    ("loss_param { normalization: NONE }", 1),
    ("loss_param { normalize: true }", 2 * 6),          # legacy flag: VALID
    ("loss_param { normalization: PRE_FIXED pre_fixed_normalizer: 128 }", 128),
    ("loss_param { normalization: PRE_FIXED pre_fixed_normalizer: 0.25 }", 1),  # at least 1
    ("loss_param { pre_fixed_normalizer: 128 }", 2),    # only PRE_FIXED reads it
])
def test_normalization(loss_param, divisor, engine):
    arrays = inputs((2, 4, 2, 3), 3, binary=True)
    layer, bottom, top = set_up(smooth_l1(loss_param), arrays)
    layer.forward(bottom, top)
    errors, grad = reference(arrays)
    np.testing.assert_allclose(top[0].cpu_data, errors.sum() / divisor, rtol=1e-5)
    layer.backward(top, [True, False, False], bottom)
    np.testing.assert_allclose(bottom[0].cpu_diff, grad / divisor, rtol=1e-5, atol=1e-7)


def test_the_per_instance_top(engine):
    arrays = inputs((2, 3, 2, 2), 4)
    layer, bottom, top = set_up(smooth_l1(), arrays, num_tops=2)
    assert top[1].shape == (2, 1, 2, 2)
    assert layer.loss_weights == [1.0, 0.0]
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    errors, _ = reference(arrays)
    np.testing.assert_allclose(top[1].cpu_data, errors.sum(axis=1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("count", [2, 3, 4])
def test_gpu_matches_cpu(count):
    arrays = inputs((2, 3, 2, 1), count)
    arrays[0] *= 2
    compare_layer_modes(smooth_l1("smooth_l1_loss_param { sigma: 2 }"), arrays, num_tops=2,
                        top_diffs=[np.float32(1.5), np.zeros((2, 1, 2, 1))],
                        propagate_down=[True, True] + [False] * (count - 2))


def test_the_weights_get_no_gradient(engine):
    arrays = inputs((2, 3), 4)
    layer, bottom, top = set_up(smooth_l1(), arrays)
    for blob in bottom[2:]:
        blob.diff[...] = 7
    layer.forward(bottom, top)
    layer.backward(top, [True, True, True, True], bottom)
    assert not bottom[2].cpu_diff.any() and not bottom[3].cpu_diff.any()


@pytest.mark.parametrize("bottoms, words", [
    ([np.zeros((2, 3))], "at least 2 bottom"),
    ([np.zeros((2, 3))] * 5, "at most 4 bottom"),
    ([np.zeros((2, 3)), np.zeros((2, 4))], "bottom 1 (target) must match pred's shape"),
    ([np.zeros((2, 3))] * 3 + [np.zeros((2, 2))], "bottom 3 (outside weights)"),
])
def test_user_errors(bottoms, words):
    with pytest.raises(CaffeError) as error:
        set_up(smooth_l1(), bottoms)
    assert words in str(error.value) and 'layer "loss"' in str(error.value)
    assert "\n" not in str(error.value)


# --- PRE_FIXED in the loss layers that read loss_param.normalization ------------------------
@pytest.mark.parametrize("text, bottoms", [
    ('type: "SoftmaxWithLoss"', [np.arange(12).reshape(4, 3) / 7, np.array([0, 2, 1, 1])]),
    ('type: "SigmoidCrossEntropyLoss"', [np.arange(12).reshape(4, 3) / 7 - 1,
                                         np.eye(4, 3)]),
    ('type: "InfogainLoss"', [np.arange(12).reshape(4, 3) / 7, np.array([0, 2, 1, 1]),
                              np.eye(3) + 0.5]),
])
def test_pre_fixed_divides_by_pre_fixed_normalizer(text, bottoms, engine):
    def run(loss_param):
        layer, bottom, top = set_up(f'name: "loss" {text} loss_param {{ {loss_param} }}',
                                    bottoms)
        layer.forward(bottom, top)
        layer.backward(top, [True] + [False] * (len(bottoms) - 1), bottom)
        return float(top[0].cpu_data), bottom[0].cpu_diff.copy()

    loss, diff = run("normalization: NONE")
    fixed_loss, fixed_diff = run("normalization: PRE_FIXED pre_fixed_normalizer: 16")
    assert fixed_loss == pytest.approx(loss / 16, rel=1e-6)
    np.testing.assert_allclose(fixed_diff, diff / 16, rtol=1e-6)
