"""Fillers: values and statistics of every Caffe filler, and the error paths."""
import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_cli import backend
from pycaffe_cli.blob import Blob
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.fillers import fill, make_filler
from pycaffe_cli.proto import caffe_pb2


def filler_param(text):
    return text_format.Parse(text, caffe_pb2.FillerParameter())


def filled(shape, text, seed=1701):
    backend.set_random_seed(seed)
    blob = Blob(shape)
    fill(blob, filler_param(text))
    return blob.data


def test_default_is_constant_zero():
    blob = Blob((2, 3))
    blob.data[...] = 7
    fill(blob, caffe_pb2.FillerParameter())
    np.testing.assert_array_equal(blob.data, 0)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (7,), (3, 1)])
def test_constant(shape):
    data = filled(shape, 'type: "constant" value: 2.5')
    assert data.dtype == np.float32
    np.testing.assert_array_equal(data, np.full(shape, 2.5, np.float32))


@pytest.mark.parametrize("low, high", [(0.0, 1.0), (-3.0, -1.0), (1.0, 2.0)])
def test_uniform(low, high):
    data = filled((50, 40, 10), f'type: "uniform" min: {low} max: {high}')
    assert data.min() >= low and data.max() <= high
    assert abs(data.mean() - (low + high) / 2) < 0.01 * (high - low)
    assert abs(data.std() - (high - low) / np.sqrt(12)) < 0.01 * (high - low)


@pytest.mark.parametrize("mean, std", [(0.0, 1.0), (1.0, 0.5), (-2.0, 3.0)])
def test_gaussian(mean, std):
    data = filled((100, 200), f'type: "gaussian" mean: {mean} std: {std}')
    assert abs(data.mean() - mean) < 0.02 * std
    assert abs(data.std() - std) < 0.02 * std


@pytest.mark.parametrize("sparse", [0, 3, 10, 25])
def test_sparse_gaussian_keeps_sparse_over_num_outputs(sparse):
    shape = (50, 400)
    data = filled(shape, f'type: "gaussian" std: 1 sparse: {sparse}')
    kept = np.count_nonzero(data) / data.size
    assert abs(kept - sparse / shape[0]) < 0.01
    if sparse:
        nonzero = data[data != 0]
        assert abs(nonzero.std() - 1.0) < 0.05


def test_same_seed_same_values():
    text = 'type: "gaussian" std: 1 sparse: 5'
    np.testing.assert_array_equal(filled((10, 20), text, 3), filled((10, 20), text, 3))
    assert not np.array_equal(filled((10, 20), text, 3), filled((10, 20), text, 4))


@pytest.mark.parametrize("shape", [(5, 8), (3, 2, 4, 4), (100, 7)])
def test_positive_unitball_rows_sum_to_one(shape):
    data = filled(shape, 'type: "positive_unitball"')
    assert data.min() >= 0 and data.max() <= 1
    np.testing.assert_allclose(data.reshape(shape[0], -1).sum(axis=1), 1.0, rtol=1e-5)


FANS = [  # shape, fan_in = count / shape[0], fan_out = count / shape[1]
    ((1000, 20, 2, 3), 120, 6000),
    ((500, 300), 300, 500),
    ((4000,), 1, 4000),
]


def variance_n(norm, fan_in, fan_out):
    return {"FAN_IN": fan_in, "FAN_OUT": fan_out, "AVERAGE": (fan_in + fan_out) / 2}[norm]


@pytest.mark.parametrize("shape, fan_in, fan_out", FANS)
@pytest.mark.parametrize("norm", ["FAN_IN", "FAN_OUT", "AVERAGE"])
def test_xavier(shape, fan_in, fan_out, norm):
    data = filled(shape, f'type: "xavier" variance_norm: {norm}')
    bound = np.sqrt(3.0 / variance_n(norm, fan_in, fan_out))
    assert np.abs(data).max() <= bound * (1 + 1e-6)
    assert np.abs(data).max() > 0.99 * bound
    assert abs(data.std() - bound / np.sqrt(3)) < 0.02 * bound


@pytest.mark.parametrize("shape, fan_in, fan_out", FANS)
@pytest.mark.parametrize("norm", ["FAN_IN", "FAN_OUT", "AVERAGE"])
def test_msra(shape, fan_in, fan_out, norm):
    data = filled(shape, f'type: "msra" variance_norm: {norm}')
    std = np.sqrt(2.0 / variance_n(norm, fan_in, fan_out))
    assert abs(data.mean()) < 0.02 * std
    assert abs(data.std() - std) < 0.02 * std


def test_xavier_default_norm_is_fan_in():
    data = filled((500, 300), 'type: "xavier"')
    assert np.abs(data).max() <= np.sqrt(3.0 / 300) * (1 + 1e-6)


def test_bilinear_4x4_kernel():
    # K = 4: f = 2, c = (2*2 - 1 - 0) / 4 = 0.75; 1 - |x/2 - 0.75| = .25 .75 .75 .25
    data = filled((2, 1, 4, 4), 'type: "bilinear"')
    w = np.array([0.25, 0.75, 0.75, 0.25])
    for channel in range(2):
        np.testing.assert_allclose(data[channel, 0], np.outer(w, w), rtol=1e-6)


def test_bilinear_3x3_kernel():
    # K = 3: f = 2, c = (4 - 1 - 0) / 4 = 0.75; x = 0, 1, 2 -> .25 .75 .75 (Caffe's formula
    # is meant for K = 2 * factor - factor % 2, so odd K that is not of that form is lopsided)
    data = filled((1, 2, 3, 3), 'type: "bilinear"')
    w = np.array([0.25, 0.75, 0.75])
    np.testing.assert_allclose(data[0, 1], np.outer(w, w), rtol=1e-6)


def test_bilinear_5x5_kernel():
    # K = 5: f = 3, c = (6 - 1 - 1) / 6 = 2/3; 1 - |x/3 - 2/3| = 1/3 2/3 1 2/3 1/3
    data = filled((1, 1, 5, 5), 'type: "bilinear"')
    w = np.array([1, 2, 3, 2, 1]) / 3
    np.testing.assert_allclose(data[0, 0], np.outer(w, w), rtol=1e-6)


@pytest.mark.parametrize("shape, message", [((4, 4), "4-axis"), ((1, 1, 3, 4), "square")])
def test_bilinear_shape_errors(shape, message):
    with pytest.raises(CaffeError, match=message):
        filled(shape, 'type: "bilinear"')


def test_unknown_filler_lists_known_ones():
    with pytest.raises(CaffeError, match='"gausian".*"gaussian".*"xavier".*"msra"'):
        make_filler(filler_param('type: "gausian"'))


def test_errors_name_the_layer():
    with pytest.raises(CaffeError, match='layer "ip1".*unknown filler type') as info:
        fill(Blob((2, 2)), filler_param('type: "nope"'), layer_name="ip1")
    assert info.value.layer == "ip1"


@pytest.mark.parametrize("text, message", [
    ('type: "constant" sparse: 3', "sparse"),
    ('type: "xavier" sparse: 1', "sparse"),
    ('type: "uniform" min: 2 max: 1', "min <= max"),
    ('type: "gaussian" std: 0', "std > 0"),
    ('type: "gaussian" sparse: -2', "sparse"),
    ('type: "gaussian" sparse: 9', "exceed"),
])
def test_bad_settings(text, message):
    with pytest.raises(CaffeError, match=message):
        filled((4, 5), text)


def test_empty_blob_is_an_error():
    with pytest.raises(CaffeError, match="empty"):
        filled((0, 3), 'type: "constant"')
