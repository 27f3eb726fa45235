"""PSROIPooling (R-FCN): forward and mapping channels against a numpy reference written from
psroi_pooling_layer.cu, the backward spread, gradients, GPU vs CPU, user errors."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, compare_layer_modes
from tests.layer_helpers import c_round, set_up


def psroi(output_dim=2, group_size=2, scale=0.5):
    return (f'name: "ps" type: "PSROIPooling" psroi_pooling_param {{ spatial_scale: {scale} '
            f'output_dim: {output_dim} group_size: {group_size} }}')


def bins(rois, group_size, scale, height, width):
    """Per ROI: (batch, [(h0, h1)] * G, [(w0, w1)] * G), the fork's float32 geometry."""
    f32 = np.float32
    out = []
    for batch, x1, y1, x2, y2 in rois:
        start_w, start_h = f32(c_round(x1)) * f32(scale), f32(c_round(y1)) * f32(scale)
        end_w = f32(c_round(x2) + 1.0) * f32(scale)
        end_h = f32(c_round(y2) + 1.0) * f32(scale)
        bin_h = max(end_h - start_h, f32(0.1)) / f32(group_size)
        bin_w = max(end_w - start_w, f32(0.1)) / f32(group_size)

        def edges(start, size, limit):
            return [(min(max(int(np.floor(f32(p) * size + start)), 0), limit),
                     min(max(int(np.ceil(f32(p + 1) * size + start)), 0), limit))
                    for p in range(group_size)]
        out.append((int(batch), edges(start_h, bin_h, height), edges(start_w, bin_w, width)))
    return out


def reference(x, rois, output_dim, group_size, scale):
    num_rois = len(rois)
    top = np.zeros((num_rois, output_dim, group_size, group_size), np.float64)
    mapping = np.zeros(top.shape, np.int64)
    for r, (batch, rows, cols) in enumerate(bins(rois, group_size, scale, *x.shape[2:])):
        for k, ph, pw in np.ndindex(output_dim, group_size, group_size):
            c = (k * group_size + ph) * group_size + pw
            (h0, h1), (w0, w1) = rows[ph], cols[pw]
            mapping[r, k, ph, pw] = c
            if h1 > h0 and w1 > w0:
                top[r, k, ph, pw] = x[batch, c, h0:h1, w0:w1].astype(np.float64).mean()
    return top, mapping


def reference_backward(x_shape, rois, top_diff, group_size, scale):
    diff = np.zeros(x_shape, np.float64)
    for r, (batch, rows, cols) in enumerate(bins(rois, group_size, scale, *x_shape[2:])):
        for k, ph, pw in np.ndindex(*top_diff.shape[1:]):
            c = (k * group_size + ph) * group_size + pw
            (h0, h1), (w0, w1) = rows[ph], cols[pw]
            if h1 > h0 and w1 > w0:
                diff[batch, c, h0:h1, w0:w1] += top_diff[r, k, ph, pw] / ((h1 - h0) * (w1 - w0))
    return diff


# image coordinates for scale 0.5 on a 6 x 7 map: whole map, inside, past the border,
# a half-pixel corner, tiny (x2 < x1), and wholly outside (every bin empty)
ROIS = np.array([[0, 0, 0, 13, 11], [1, 2.5, 3, 9, 8], [1, 10, 6, 30, 30], [0, 3.5, 1.5, 6, 4],
                 [0, 8, 4, 2, 9], [1, 40, 40, 50, 50]], np.float32)


@pytest.mark.parametrize("output_dim, group_size", [(2, 2), (1, 3)])
def test_forward_and_backward_match_the_reference(output_dim, group_size, engine):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, output_dim * group_size ** 2, 6, 7)).astype(np.float32)
    layer, bottom, top = set_up(psroi(output_dim, group_size), [x, ROIS])
    assert top[0].shape == (len(ROIS), output_dim, group_size, group_size)
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    want, mapping = reference(x, ROIS, output_dim, group_size, 0.5)
    np.testing.assert_allclose(top[0].cpu_data, want, rtol=1e-5, atol=1e-6)
    if engine == "cpu":
        np.testing.assert_array_equal(layer.mapping, mapping)
    assert (want[-1] == 0).all()
    dy = rng.normal(size=want.shape).astype(np.float32)
    top[0].diff[...] = dy
    layer.backward(top, [True, False], bottom)
    np.testing.assert_allclose(bottom[0].cpu_diff,
                               reference_backward(x.shape, ROIS, dy, group_size, 0.5),
                               rtol=1e-5, atol=1e-6)


def test_gradient():
    x = np.random.default_rng(7).normal(size=(2, 8, 6, 7)).astype(np.float32)
    layer, bottom, top = set_up(psroi(2, 2), [x, ROIS[:5]])
    check_gradient(layer, bottom, top, check_bottom=[0])


def test_gpu_matches_cpu():
    rng = np.random.default_rng(11)
    x = rng.normal(size=(2, 4, 4, 5)).astype(np.float32)
    rois = np.array([[0, 0, 0, 9, 7], [1, 2.5, 1, 6, 5], [0, 7, 5, 3, 2], [1, 30, 30, 40, 40]],
                    np.float32)
    dy = rng.normal(size=(4, 1, 2, 2)).astype(np.float32)
    compare_layer_modes(psroi(1, 2), [x, rois], top_diffs=[dy], propagate_down=[True, False],
                        rtol=0, atol=0)


@pytest.mark.parametrize("text, bottoms, words", [
    (psroi(2, 2), [np.zeros((1, 7, 4, 4)), np.zeros((2, 5))], "7 channels; output_dim 2"),
    (psroi(2, 2), [np.zeros((1, 8, 4, 4)), np.zeros((2, 6))], "5 values per ROI"),
    (psroi(2, 2), [np.zeros((1, 8, 4, 4))], "exactly 2 bottom"),
    (psroi(0, 2), [np.zeros((1, 8, 4, 4)), np.zeros((2, 5))], "output_dim > 0"),
])
def test_user_errors_at_setup(text, bottoms, words):
    with pytest.raises(CaffeError) as error:
        set_up(text, bottoms)
    assert words in str(error.value) and 'layer "ps"' in str(error.value)
    assert "\n" not in str(error.value)


def test_a_batch_index_outside_the_features_is_refused(engine):
    rois = np.array([[-1, 0, 0, 2, 2]], np.float32)
    layer, bottom, top = set_up(psroi(2, 2), [np.zeros((1, 8, 4, 4)), rois])
    with pytest.raises(CaffeError, match="ROI 0 has batch index -1, outside the 1 image"):
        layer.forward(bottom, top)
