"""SPP layer: Caffe's output shapes (test_spp_layer.cpp), values against per-level pooling
references (stochastic TRAIN sampling included), gradients, user errors; on both engines."""
import math

import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.blob import Blob
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import v1_type_name
from pycaffe_cli.layers.kernels.geometry import pool_out_size
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import assert_tops_on_device, engine_cases
from tests.kernels import reference
from tests.layer_helpers import no_ties, set_up


def spp(height, pool="MAX"):
    return f'name: "spp" type: "SPP" spp_param {{ pyramid_height: {height} pool: {pool} }}'


@pytest.mark.parametrize("shape, height, want", [
    ((2, 3, 9, 8), 3, (2, 63)),          # TestSetup: 3 * (1 + 4 + 16)
    ((4, 3, 1024, 765), 5, (4, 1023)),   # TestEqualOutputDims: 3 * 341
    ((10, 3, 7, 7), 3, (10, 63)),        # TestEqualOutputDims2
    ((2, 3, 9, 8), 1, (2, 3, 1, 1)),     # one level: the pooling top itself
])
def test_output_shapes(shape, height, want):
    _, _, top = set_up(spp(height), [Blob(shape)])
    assert top[0].shape == want


def level_reference(x, level, pool):
    """Caffe's GetPoolingParam written out, then the numpy pooling reference."""
    num, channels, height, width = x.shape
    bins = 2 ** level
    kernel = tuple(math.ceil(s / bins) for s in (height, width))
    pad = tuple((k * bins - s + 1) // 2 for k, s in zip(kernel, (height, width)))
    out = tuple(pool_out_size(s, k, p, k) for s, k, p in zip((height, width), kernel, pad))
    planes = x.reshape(num * channels, height, width)
    if pool == "MAX":
        top, _ = reference.max_pool(planes, out, kernel, kernel, pad)
    elif pool == "AVE":
        top = reference.ave_pool(planes, out, kernel, kernel, pad)
    else:
        top = reference.sto_pool_test(planes, out, kernel, kernel)
    return top.reshape(num, -1)


@pytest.mark.parametrize("shape, height, pool", [
    ((2, 3, 9, 8), 3, "MAX"), ((2, 3, 9, 8), 3, "AVE"), ((1, 2, 7, 7), 3, "MAX"),
    ((2, 2, 13, 6), 2, "AVE"), ((2, 2, 8, 8), 3, "STOCHASTIC"), ((2, 2, 9, 8), 1, "MAX"),
])
def test_forward_concatenates_the_levels(shape, height, pool, engine):
    x = no_ties(np.random.default_rng(0), shape, low=0.1, high=1.0)
    layer, bottom, top = set_up(spp(height, pool), [x], phase=caffe_pb2.TEST)
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    want = np.concatenate([level_reference(x, level, pool) for level in range(height)], axis=1)
    # one level: the pooling top itself, (N, C, 1, 1)
    assert top[0].shape == (want.shape if height > 1 else want.shape + (1, 1))
    np.testing.assert_allclose(top[0].cpu_data.reshape(want.shape), want, rtol=1e-5,
                               atol=1e-6)


def test_one_level_is_global_pooling(engine):
    x = no_ties(np.random.default_rng(1), (2, 3, 5, 4))
    layer, bottom, top = set_up(spp(1), [x])
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data[..., 0, 0], x.max(axis=(2, 3)))
    check_gradient(layer, bottom, top, stepsize=1e-3)


# test_spp_layer.cpp TestGradient: pyramid height 3 on 2x3x9x8 (exhaustive there); the GPU
# cases on a smaller input with fewer probes (the simulator is slow).
@pytest.mark.parametrize("engine, pool, shape, probes", engine_cases(
    [("MAX", (2, 3, 9, 8), (4, 32)), ("AVE", (2, 3, 9, 8), (4, 32))],
    [("AVE", (1, 2, 8, 8), (3, 8)), ("MAX", (1, 2, 8, 8), (3, 8))], unpack=True),
    indirect=["engine"])
def test_gradient(engine, pool, shape, probes):
    x = no_ties(np.random.default_rng(2), shape)
    layer, bottom, top = set_up(spp(3, pool), [x])
    directions, elements = probes
    check_gradient(layer, bottom, top, stepsize=1e-3, directions=directions,
                   elements=elements)


def sto_train_reference(x, height, seed):
    """Caffe's stochastic TRAIN pooling of every level, with the uniforms pycaffe draws (after
    ``backend.set_random_seed(seed)``: 1 - random(), one per output, level after level), in
    float32 as Caffe sums: (the SPP top, the flat index into x each output sampled)."""
    rng = np.random.default_rng(seed)
    num, channels, height_in, width_in = x.shape
    planes = x.astype(np.float32).reshape(num * channels, height_in, width_in)
    values, where = [], []
    for level in range(height):
        bins = 2 ** level
        kernel_h, kernel_w = math.ceil(height_in / bins), math.ceil(width_in / bins)
        uniform = np.float32(1.0) - rng.random((planes.shape[0], bins, bins), dtype=np.float32)
        value = np.zeros(uniform.shape, np.float32)
        index = np.zeros(uniform.shape, np.int64)
        for p, ph, pw in np.ndindex(*uniform.shape):
            rows = range(ph * kernel_h, min((ph + 1) * kernel_h, height_in))
            cols = range(pw * kernel_w, min((pw + 1) * kernel_w, width_in))
            total = np.float32(0.0)
            for h in rows:
                for w in cols:
                    total += planes[p, h, w]
            threshold = uniform[p, ph, pw] * total
            cumsum = np.float32(0.0)
            for h, w in ((h, w) for h in rows for w in cols):
                cumsum += planes[p, h, w]
                if cumsum >= threshold:
                    break
            value[p, ph, pw] = planes[p, h, w]
            index[p, ph, pw] = (p * height_in + h) * width_in + w
        values.append(value.reshape(num, -1))
        where.append(index.reshape(num, -1))
    return np.concatenate(values, axis=1), np.concatenate(where, axis=1)


@pytest.mark.parametrize("height, shape", [(3, (2, 2, 8, 8)), (1, (2, 2, 9, 8))])
def test_stochastic_train_samples_and_routes_back(height, shape, engine):
    """Both engines draw the same samples from backend.rng(), and backward routes each top diff
    to the input it sampled (summed over the levels)."""
    x = np.random.default_rng(3).uniform(0.1, 1.0, shape)
    layer, bottom, top = set_up(spp(height, "STOCHASTIC"), [x])
    backend.set_random_seed(11)
    layer.forward(bottom, top)
    assert_tops_on_device(layer, top)
    want, where = sto_train_reference(x, height, 11)
    np.testing.assert_array_equal(top[0].cpu_data.reshape(want.shape), want)
    dy = np.random.default_rng(6).normal(size=top[0].shape).astype(np.float32)
    top[0].diff[...] = dy
    layer.backward(top, [True], bottom)
    grad = np.zeros(x.size)
    np.add.at(grad, where.ravel(), dy.ravel())
    np.testing.assert_allclose(bottom[0].cpu_diff, grad.reshape(shape), rtol=1e-6, atol=1e-7)
    check_gradient(layer, bottom, top, stepsize=1e-4)


def test_reshape_follows_a_new_input_shape():
    layer, bottom, top = set_up(spp(2), [np.zeros((1, 2, 4, 4))])
    x = no_ties(np.random.default_rng(4), (3, 2, 9, 11))
    bigger = Blob(x.shape)
    bigger.data[...] = x
    layer.forward([bigger], top)
    want = np.concatenate([level_reference(x, level, "MAX") for level in range(2)], axis=1)
    np.testing.assert_array_equal(top[0].data, want)


def test_v1_name():
    assert v1_type_name("SPP") == "SPP"


@pytest.mark.parametrize("text, shape, message", [
    (spp(0), (1, 1, 4, 4), "pyramid_height must be at least 1"),
    ('name: "spp" type: "SPP"', (1, 1, 4, 4), "pyramid_height must be at least 1"),
    (spp(2), (1, 4, 4), "input must have 4 axes"),
    (spp(2), (1, 1, 0, 4), "input dimensions cannot be zero"),
    # 9 rows in 2 bins: kernel 5, pad 1, which stochastic pooling cannot do
    (spp(2, "STOCHASTIC"), (1, 1, 9, 8), "pyramid level 1 .*padding is implemented only"),
    # 5 rows in 4 bins: kernel 2 and pad 2
    (spp(3), (1, 1, 5, 5), "pyramid level 2 .*must be smaller than kernel"),
])
def test_user_errors_name_the_layer(text, shape, message):
    with pytest.raises(CaffeError, match=f'layer "spp": .*{message}'):
        set_up(text, [Blob(shape)])
