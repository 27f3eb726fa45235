"""ROIPooling (Fast R-CNN): forward and argmax against a numpy reference written from
roi_pooling_layer.cpp, backward through the argmax, gradients, GPU vs CPU, user errors."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, compare_layer_modes
from tests.layer_helpers import c_round, no_ties, set_up


def roi_pool(pooled_h=2, pooled_w=3, scale=0.5):
    return (f'name: "roi" type: "ROIPooling" roi_pooling_param {{ pooled_h: {pooled_h} '
            f'pooled_w: {pooled_w} spatial_scale: {scale} }}')


def reference(x, rois, pooled_h, pooled_w, scale):
    """(top, argmax) by the fork's loops, vectorised over channels."""
    num_rois, channels, height, width = len(rois), x.shape[1], x.shape[2], x.shape[3]
    top = np.zeros((num_rois, channels, pooled_h, pooled_w), np.float32)
    argmax = np.full(top.shape, -1, np.int64)
    f32 = np.float32
    for r, (batch, x1, y1, x2, y2) in enumerate(rois):
        x1, y1, x2, y2 = (int(c_round(f32(v) * f32(scale))) for v in (x1, y1, x2, y2))
        bin_h = f32(max(y2 - y1 + 1, 1)) / f32(pooled_h)
        bin_w = f32(max(x2 - x1 + 1, 1)) / f32(pooled_w)
        for ph in range(pooled_h):
            h0 = min(max(int(np.floor(f32(ph) * bin_h)) + y1, 0), height)
            h1 = min(max(int(np.ceil(f32(ph + 1) * bin_h)) + y1, 0), height)
            for pw in range(pooled_w):
                w0 = min(max(int(np.floor(f32(pw) * bin_w)) + x1, 0), width)
                w1 = min(max(int(np.ceil(f32(pw + 1) * bin_w)) + x1, 0), width)
                if h1 <= h0 or w1 <= w0:
                    continue
                window = x[int(batch), :, h0:h1, w0:w1].reshape(channels, -1)
                first = window.argmax(axis=1)
                top[r, :, ph, pw] = window[np.arange(channels), first]
                argmax[r, :, ph, pw] = (h0 + first // (w1 - w0)) * width + w0 + first % (w1 - w0)
    return top, argmax


def reference_backward(x_shape, rois, argmax, top_diff):
    diff = np.zeros(x_shape, np.float64)
    width = x_shape[3]
    for r, c, ph, pw in np.ndindex(*argmax.shape):
        index = argmax[r, c, ph, pw]
        if index >= 0:
            diff[int(rois[r][0]), c, index // width, index % width] += top_diff[r, c, ph, pw]
    return diff


# image coordinates for scale 0.5 on a 6 x 8 map: whole map, inside, past the border,
# malformed (x2 < x1: a 1-pixel-wide ROI), a half-pixel corner (rounds away from zero),
# and one ROI wholly outside (every bin empty)
ROIS = np.array([[0, 0, 0, 15, 11], [1, 2, 3, 9, 8], [1, 10, 6, 30, 30], [0, 8, 4, 2, 9],
                 [1, 1, 1, 5, 5], [0, 40, 40, 50, 50]], np.float32)


@pytest.mark.parametrize("pooled_h, pooled_w", [(2, 3), (3, 3), (4, 1)])
def test_forward_and_backward_match_the_reference(pooled_h, pooled_w, engine):
    rng = np.random.default_rng(3)
    x = no_ties(rng, (2, 3, 6, 8))
    layer, bottom, top = set_up(roi_pool(pooled_h, pooled_w), [x, ROIS])
    assert top[0].shape == (len(ROIS), 3, pooled_h, pooled_w)
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    want, argmax = reference(x, ROIS, pooled_h, pooled_w, 0.5)
    np.testing.assert_array_equal(top[0].cpu_data, want)
    if engine == "cpu":
        np.testing.assert_array_equal(layer.argmax, argmax)
    assert (argmax[-1] == -1).all() and (want[-1] == 0).all()
    dy = rng.normal(size=want.shape).astype(np.float32)
    top[0].diff[...] = dy
    layer.backward(top, [True, False], bottom)
    np.testing.assert_allclose(bottom[0].cpu_diff, reference_backward(x.shape, ROIS, argmax, dy),
                               rtol=1e-6, atol=1e-6)


def test_spatial_scale_one_and_a_single_roi_per_image():
    x = no_ties(np.random.default_rng(5), (1, 2, 5, 5))
    rois = np.array([[0, 1, 1, 3, 4]], np.float32)
    layer, bottom, top = set_up(roi_pool(2, 2, 1), [x, rois])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, reference(x, rois, 2, 2, 1.0)[0])
    # rows 1..4 in bins [0, 2) and [2, 4) + 1; columns 1..3 in [0, 2) and [1, 3) + 1
    np.testing.assert_array_equal(top[0].data[0, 0, 0, 0], x[0, 0, 1:3, 1:3].max())
    np.testing.assert_array_equal(top[0].data[0, 1, 1, 1], x[0, 1, 3:5, 2:4].max())


def test_gradient():
    x = no_ties(np.random.default_rng(7), (2, 2, 6, 8), low=-5, high=5)
    layer, bottom, top = set_up(roi_pool(2, 2), [x, ROIS[:5]])
    check_gradient(layer, bottom, top, check_bottom=[0], stepsize=1e-3, threshold=1e-2)


def test_gpu_matches_cpu():
    rng = np.random.default_rng(11)
    x = no_ties(rng, (2, 2, 4, 5))
    rois = np.array([[0, 0, 0, 9, 7], [1, 2, 1, 6, 5], [0, 7, 5, 3, 2], [1, 30, 30, 40, 40]],
                    np.float32)
    dy = rng.normal(size=(4, 2, 2, 2)).astype(np.float32)
    compare_layer_modes(roi_pool(2, 2), [x, rois], top_diffs=[dy], propagate_down=[True, False],
                        rtol=0, atol=0)


@pytest.mark.parametrize("text, bottoms, words", [
    (roi_pool(), [np.zeros((1, 1, 4, 4)), np.zeros((2, 4))], "5 values per ROI"),
    (roi_pool(), [np.zeros((1, 1, 4, 4))], "exactly 2 bottom"),
    (roi_pool(0, 2), [np.zeros((1, 1, 4, 4)), np.zeros((2, 5))], "pooled_h > 0"),
    (roi_pool(), [np.zeros((4, 4)), np.zeros((2, 5))], "4 axes"),
])
def test_user_errors_at_setup(text, bottoms, words):
    with pytest.raises(CaffeError) as error:
        set_up(text, bottoms)
    assert words in str(error.value) and 'layer "roi"' in str(error.value)
    assert "\n" not in str(error.value)


def test_a_batch_index_outside_the_features_is_refused(engine):
    rois = np.array([[0, 0, 0, 2, 2], [2, 0, 0, 2, 2]], np.float32)
    layer, bottom, top = set_up(roi_pool(), [np.zeros((2, 1, 4, 4)), rois])
    with pytest.raises(CaffeError, match="ROI 1 has batch index 2, outside the 2 image"):
        layer.forward(bottom, top)
