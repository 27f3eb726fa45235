"""Pooling layer: Caffe's known values, shapes, numpy references (forward and backward, the
stochastic TRAIN samples too), gradients, user errors; on both engines."""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.blob import Blob
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import create_layer, v1_type_name
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device
from tests.kernels import reference
from tests.layer_helpers import blob_of, layer_param, no_ties, set_up


def pooling(params):
    return f'name: "pool" type: "Pooling" pooling_param {{ {params} }}'


MAGIC6 = np.array([[35, 1, 6, 26, 19, 24], [3, 32, 7, 21, 23, 25], [31, 9, 2, 22, 27, 20],
                   [8, 28, 33, 17, 10, 15], [30, 5, 34, 12, 14, 16], [4, 36, 29, 13, 18, 11]],
                  np.float32)
SQUARE_INPUT = np.array([[1, 2, 5, 2, 3], [9, 4, 1, 4, 8], [1, 2, 5, 2, 3]], np.float32)

# test_pooling_layer.cpp TestForwardSquare / RectHigh / RectWide: (params, input, top, mask)
CAFFE_MAX = [
    ("kernel_size: 2", SQUARE_INPUT, [[9, 5, 5, 8], [9, 5, 5, 8]],
     [[5, 2, 2, 9], [5, 12, 12, 9]]),
    ("kernel_h: 3 kernel_w: 2", MAGIC6,
     [[35, 32, 26, 27, 27], [32, 33, 33, 27, 27], [31, 34, 34, 27, 27], [36, 36, 34, 18, 18]],
     [[0, 7, 3, 16, 16], [7, 20, 20, 16, 16], [12, 26, 26, 16, 16], [31, 31, 26, 34, 34]]),
    ("kernel_h: 2 kernel_w: 3", MAGIC6,
     [[35, 32, 26, 26], [32, 32, 27, 27], [33, 33, 33, 27], [34, 34, 34, 17], [36, 36, 34, 18]],
     [[0, 7, 3, 3], [7, 7, 16, 16], [20, 20, 20, 16], [26, 26, 26, 21], [31, 31, 26, 34]]),
]


@pytest.mark.parametrize("params, image, want_top, want_mask", CAFFE_MAX)
@pytest.mark.parametrize("with_mask", [False, True])
def test_caffe_max_examples(params, image, want_top, want_mask, with_mask):
    x = np.tile(image, (2, 2, 1, 1))
    layer, bottom, top = set_up(pooling(params), [x], num_tops=2 if with_mask else 1)
    want_shape = (2, 2) + np.shape(want_top)
    assert all(blob.shape == want_shape for blob in top)
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, np.broadcast_to(want_top, want_shape))
    if with_mask:
        assert top[1].data.dtype == np.float32
        np.testing.assert_array_equal(top[1].data, np.broadcast_to(want_mask, want_shape))


def test_caffe_max_padded_example():
    x = np.array([[1, 2, 4], [2, 3, 2], [4, 2, 1]], np.float32)[None, None]
    layer, bottom, top = set_up(pooling("kernel_size: 3 stride: 2 pad: 2"), [x])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data[0, 0], [[1, 4, 4], [4, 4, 4], [4, 4, 1]])


def test_caffe_ave_padded_example():
    layer, bottom, top = set_up(pooling("kernel_size: 3 stride: 1 pad: 1 pool: AVE"),
                                [np.full((1, 1, 3, 3), 2.0)])
    layer.forward(bottom, top)
    np.testing.assert_allclose(top[0].data[0, 0], [[8 / 9, 4 / 3, 8 / 9], [4 / 3, 2, 4 / 3],
                                                   [8 / 9, 4 / 3, 8 / 9]], rtol=1e-6)


@pytest.mark.parametrize("params, want", [
    ("kernel_size: 3 stride: 2", (3, 2)),
    ("kernel_size: 3 stride: 2 pad: 1 pool: AVE", (4, 3)),
    ("global_pooling: true pool: AVE", (1, 1)),
    ("kernel_size: 3 stride: 2 round_mode: FLOOR", (2, 2)),
    ("kernel_size: 3 stride: 2 pad: 1 round_mode: FLOOR", (3, 3)),
    ("kernel_h: 4 kernel_w: 2 stride_h: 1 stride_w: 3 pad_h: 1 pad_w: 0", (5, 2)),
])
def test_output_shapes(params, want):
    # test_pooling_layer.cpp TestSetup / TestSetupPadded / TestSetupGlobalPooling on 6x5.
    _, _, top = set_up(pooling(params), [np.zeros((2, 3, 6, 5))])
    assert top[0].shape == (2, 3) + want


# kernel 2/3, stride 1/2, pad 0/1, and non-square windows through the _h/_w fields.
GEOMETRIES = [f"kernel_size: {k} stride: {s} pad: {p}" for k in (2, 3) for s in (1, 2)
              for p in (0, 1)] + ["kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 1 pad_w: 1",
                                  "kernel_h: 1 kernel_w: 3 stride_h: 1 stride_w: 2 pad_h: 0",
                                  "global_pooling: true"]


def window(layer):
    return layer.kernel, layer.stride, layer.pad


@pytest.mark.parametrize("params", GEOMETRIES)
@pytest.mark.parametrize("num_tops", [1, 2])
def test_max_matches_reference_and_gradient(params, num_tops, engine):
    x = no_ties(np.random.default_rng(0), (2, 3, 6, 5))
    layer, bottom, top = set_up(pooling(params), [x], num_tops=num_tops)
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    kernel, stride, pad = window(layer)
    planes = x.reshape(6, 6, 5)
    want_top, want_mask = reference.max_pool(planes, top[0].shape[2:], kernel, stride, pad)
    np.testing.assert_array_equal(top[0].data.reshape(want_top.shape), want_top)
    if num_tops == 2:
        np.testing.assert_array_equal(top[1].data.reshape(want_mask.shape), want_mask)
    top[0].diff[...] = np.random.default_rng(1).normal(size=top[0].shape)
    layer.backward(top, [True], bottom)
    want = reference.route(top[0].diff.reshape(want_top.shape), want_mask, planes.shape)
    np.testing.assert_allclose(bottom[0].diff.reshape(planes.shape), want, atol=1e-6)
    # Steps smaller than the gaps between inputs keep every argmax in place.
    check_gradient(layer, bottom, top, stepsize=1e-3)


@pytest.mark.parametrize("params", GEOMETRIES + ["kernel_size: 3 stride: 2 pad: 2",
                                                 "kernel_size: 5 stride: 3 pad: 1"])
@pytest.mark.parametrize("shape", [(2, 3, 6, 5), (1, 2, 13, 17)])
def test_inference_pass_gives_the_max_without_the_mask(params, shape):
    # what the inference plan runs on the CPU: the same top, NaNs skipped, -inf floored
    x = np.random.default_rng(2).normal(size=shape).astype(np.float32)
    x[0, 0, 0, :2] = np.nan
    x[0, 1] = -np.inf
    layer, bottom, top = set_up(pooling(params), [x])
    layer.forward(bottom, top)
    want = top[0].data.copy()
    assert np.all(want[0, 1] == -np.finfo(np.float32).max)
    top[0].data[...] = 7
    mask = layer._mask.copy()
    layer.inference().forward_pass()(bottom, top)
    np.testing.assert_array_equal(top[0].data, want)
    np.testing.assert_array_equal(layer._mask, mask)   # not written


def test_inference_pass_keeps_a_mask_top_and_the_other_methods(engine):
    x = no_ties(np.random.default_rng(0), (2, 3, 6, 5))
    for params, num_tops in (("kernel_size: 2", 2), ("kernel_size: 2 pool: AVE", 1)):
        layer, bottom, top = set_up(pooling(params), [x], num_tops=num_tops)
        assert layer.inference().forward_pass() == layer.forward_pass()
    layer, bottom, top = set_up(pooling("kernel_size: 2"), [x])
    assert (layer.inference().forward_pass() == layer.forward_pass()) == (engine == "gpu")


@pytest.mark.parametrize("params", GEOMETRIES + [
    "kernel_h: 2 kernel_w: 3 stride_h: 1 stride_w: 2 pad: 1"])
def test_ave_matches_reference_and_gradient(params, engine):
    x = np.random.default_rng(2).normal(size=(2, 3, 6, 5))
    layer, bottom, top = set_up(pooling(params + " pool: AVE"), [x])
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    kernel, stride, pad = window(layer)
    want = reference.ave_pool(x.reshape(6, 6, 5), top[0].shape[2:], kernel, stride, pad)
    np.testing.assert_allclose(top[0].data.reshape(want.shape), want, rtol=1e-5, atol=1e-6)
    dy = np.random.default_rng(1).normal(size=top[0].shape)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    want = reference.ave_pool_backward(dy.astype(np.float32).reshape((6,) + top[0].shape[2:]),
                                       (6, 6, 5), kernel, stride, pad)
    np.testing.assert_allclose(bottom[0].diff.reshape(want.shape), want, rtol=1e-5, atol=1e-6)
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize("params", ["kernel_h: 3 kernel_w: 4 stride: 2 pad: 1",
                                    "kernel_h: 4 kernel_w: 3 stride: 2 pad: 2 pool: AVE"])
def test_caffe_gradient_cases_exhaustive(params, engine):
    # test_pooling_layer.cpp TestGradientMax / TestGradientAvePadded (on 2x3x6x5 there).
    x = no_ties(np.random.default_rng(3), (1, 2, 6, 5))
    layer, bottom, top = set_up(pooling(params), [x])
    check_gradient(layer, bottom, top, stepsize=1e-3, mode="exhaustive")


def test_global_pooling_follows_the_input_size(engine):
    layer, bottom, top = set_up(pooling("global_pooling: true"), [np.zeros((1, 2, 4, 3))])
    x = no_ties(np.random.default_rng(4), (2, 2, 5, 7))
    bigger = Blob(x.shape)
    bigger.data[...] = x
    layer.forward([bigger], top)
    assert top[0].shape == (2, 2, 1, 1)
    np.testing.assert_array_equal(top[0].data[..., 0, 0], x.max(axis=(2, 3)))


def stochastic(phase, params="kernel_size: 3 stride: 2"):
    x = np.random.default_rng(5).uniform(0.1, 1.0, (2, 3, 7, 6))
    return set_up(pooling(params + " pool: STOCHASTIC"), [x], phase=phase)


def test_stochastic_test_phase_is_the_weighted_average(engine):
    layer, bottom, top = stochastic(caffe_pb2.TEST)
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    want = reference.sto_pool_test(bottom[0].data.reshape(6, 7, 6), top[0].shape[2:], (3, 3),
                                   (2, 2))
    np.testing.assert_allclose(top[0].data.reshape(want.shape), want, rtol=1e-5)
    # y = sum x^2 / sum x over each window: dy/dx = (2 x - y) / sum x
    x = bottom[0].data.reshape(6, 7, 6).astype(np.float64)
    dy = np.random.default_rng(7).normal(size=want.shape)
    top[0].diff[...] = dy.reshape(top[0].shape)
    layer.backward(top, [True], bottom)
    want_dx = np.zeros_like(x)
    for ph, pw, rows, cols, _ in reference.windows(7, 6, want.shape[1:], (3, 3), (2, 2),
                                                   (0, 0)):
        total = x[:, rows, cols].sum(axis=(1, 2))[:, None, None]
        want_dx[:, rows, cols] += (dy[:, ph, pw, None, None] * (2 * x[:, rows, cols]
                                   - want[:, ph, pw, None, None]) / total)
    np.testing.assert_allclose(bottom[0].diff.reshape(x.shape), want_dx, rtol=1e-5, atol=1e-6)
    check_gradient(layer, bottom, top, stepsize=1e-3)


def sto_pool_train(x, uniform, pooled, kernel, stride):
    """(top, index h * W + w) of Caffe's StoPoolForwardTrain for x of shape (P, H, W): the
    first window position whose running float32 sum reaches u * (the window's sum)."""
    planes, height, width = x.shape
    top = np.zeros((planes,) + tuple(pooled), np.float32)
    index = np.zeros((planes,) + tuple(pooled), np.int64)
    for ph, pw, rows, cols, _ in reference.windows(height, width, pooled, kernel, stride,
                                                   (0, 0)):
        for p in range(planes):
            running = np.cumsum(x[p, rows, cols].ravel(), dtype=np.float32)
            first = np.argmax(running >= uniform[p, ph, pw] * running[-1])
            n_cols = cols.stop - cols.start
            top[p, ph, pw] = x[p, rows, cols].ravel()[first]
            index[p, ph, pw] = (rows.start + first // n_cols) * width + cols.start \
                + first % n_cols
    return top, index


def test_stochastic_train_draws_from_backend_rng_and_routes_back(engine):
    layer, bottom, top = stochastic(caffe_pb2.TRAIN)
    backend.set_random_seed(11)
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    first = top[0].data.copy()
    # Both engines draw u in (0, 1] on the host from backend.rng(): the same samples.
    backend.set_random_seed(11)
    uniform = np.float32(1.0) - backend.rng().random(top[0].shape, dtype=np.float32)
    want_top, want_index = sto_pool_train(bottom[0].data.reshape(6, 7, 6),
                                          uniform.reshape(6, *top[0].shape[2:]),
                                          top[0].shape[2:], (3, 3), (2, 2))
    np.testing.assert_array_equal(first.reshape(want_top.shape), want_top)
    backend.set_random_seed(11)
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, first)
    x = bottom[0].data
    for n, c, ph, pw in np.ndindex(*top[0].shape):
        patch = x[n, c, 2 * ph:2 * ph + 3, 2 * pw:2 * pw + 3]
        assert top[0].data[n, c, ph, pw] in patch
    top[0].diff[...] = 1
    layer.backward(top, [True], bottom)
    # Every output's unit gradient lands on one input holding the sampled value.
    assert bottom[0].diff.sum() == pytest.approx(top[0].count())
    picked = bottom[0].diff > 0
    assert set(np.unique(x[picked])) <= set(np.unique(top[0].data))
    dy = np.random.default_rng(7).normal(size=top[0].shape).astype(np.float32)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    want = reference.route(dy.reshape(want_top.shape), want_index, (6, 7, 6))
    np.testing.assert_allclose(bottom[0].diff.reshape(want.shape), want, rtol=1e-5, atol=1e-6)
    check_gradient(layer, bottom, top, stepsize=1e-4)


def test_backward_respects_propagate_down(engine):
    layer, bottom, top = set_up(pooling("kernel_size: 2"), [np.ones((1, 1, 4, 4))])
    layer.forward(bottom, top)
    bottom[0].diff[...] = 7
    layer.backward(top, [False], bottom)
    np.testing.assert_array_equal(bottom[0].diff, 7)


def test_v1_name():
    assert v1_type_name("POOLING") == "Pooling"


@pytest.mark.parametrize("params, shape, num_tops, message", [
    ("kernel_size: 2 pool: AVE", (1, 1, 4, 4), 2, "only MAX pooling has a second"),
    ("kernel_size: 2 pool: STOCHASTIC", (1, 1, 4, 4), 2, "only MAX pooling has a second"),
    ("kernel_size: 2", (1, 1, 4, 4), 3, "at most 2 top"),
    ("kernel_size: 3 pad: 1 pool: STOCHASTIC", (1, 1, 4, 4), 1, "padding is implemented only"),
    ("kernel_size: 2", (1, 4, 4), 1, "input must have 4 axes"),
    ("kernel_size: 2 pad: 2", (1, 1, 4, 4), 1, "must be smaller than kernel"),
    ("", (1, 1, 4, 4), 1, "kernel size must be specified"),
    ("kernel_h: 2", (1, 1, 4, 4), 1, "must be given together"),
    ("global_pooling: true kernel_size: 2", (1, 1, 4, 4), 1, "filter size cannot be"),
    ("global_pooling: true stride: 2", (1, 1, 4, 4), 1, "only pad = 0 and stride = 1"),
    ("kernel_size: 2 stride: 0", (1, 1, 4, 4), 1, "stride dimensions must be positive"),
])
def test_user_errors_name_the_layer(params, shape, num_tops, message):
    with pytest.raises(CaffeError, match=f'layer "pool".*{message}'):
        set_up(pooling(params), [np.zeros(shape)], num_tops=num_tops)


def test_in_place_is_an_error():
    layer = create_layer(layer_param(pooling("kernel_size: 1")))
    blob = blob_of(np.zeros((1, 1, 2, 2)))
    with pytest.raises(CaffeError, match='"pool".*in-place'):
        layer.setup([blob], [blob])
