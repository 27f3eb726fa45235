"""caffe.Detector: windows cut out of image files (with and without R-CNN context padding),
warped to the input size and classified; checked against a numpy reference."""
import os
import sys
import types

import numpy as np
import pytest

from caffe import io as caffe_io
from caffe.detector import Detector
from caffe.pycaffe import Net
from tests.caffe_api.image_nets import CLASSES, TinyModel, preprocess, save_png
from tests.numerics import close_to

MEAN = np.array([10.0, 20.0, 30.0])  # per channel, in BGR order as the net sees it
BGR = (2, 1, 0)


@pytest.fixture
def model(tmp_path):
    return TinyModel(tmp_path)  # input 4 x 3 x 4 x 4, 5 classes


@pytest.fixture
def images(tmp_path):
    """Two PNG files (8 x 8 and 6 x 9) and their pixels as load_image gives them."""
    rng = np.random.default_rng(11)
    files = {}
    for name, shape in (("a.png", (8, 8, 3)), ("b.png", (6, 9, 3))):
        pixels = rng.integers(0, 256, shape, dtype=np.uint8)
        files[save_png(tmp_path / name, pixels)] = pixels.astype(np.float32) / 255
    return files


def warped(window_pixels):
    """A window as the transformer warps it to the 4 x 4 input."""
    if window_pixels.shape[:2] == (4, 4):
        return window_pixels
    return caffe_io.resize_image(window_pixels, (4, 4))


def test_is_a_test_phase_net_and_configures_crops(model):
    detector = Detector(model.model_file, model.weights_file)
    assert isinstance(detector, Net)
    np.testing.assert_array_equal(detector.crop_dims, [4, 4, 3])  # H x W x K
    assert detector.context_pad is None and not hasattr(detector, "crop_mean")


def test_detect_windows(model, images):
    detector = Detector(model.model_file, model.weights_file, mean=MEAN, raw_scale=255,
                        channel_swap=BGR)
    (a, a_pixels), (b, b_pixels) = images.items()
    windows_a = [(0, 0, 4, 4), (2, 3, 6, 7), (1, 1, 7, 5)]
    windows_b = [np.array([0, 1, 6, 9])]
    detections = detector.detect_windows([(a, windows_a), (b, windows_b)])
    assert [d["filename"] for d in detections] == [a, a, a, b]
    assert [tuple(d["window"]) for d in detections] == windows_a + [(0, 1, 6, 9)]
    crops = [a_pixels[y0:y1, x0:x1] for y0, x0, y1, x1 in windows_a] + [b_pixels[0:6, 1:9]]
    caffe_in = np.stack([preprocess(warped(c), BGR, 255, MEAN) for c in crops])
    expected = model.probabilities(caffe_in)
    for detection, row in zip(detections, expected):
        assert detection["prediction"].shape == (CLASSES,)
        np.testing.assert_allclose(detection["prediction"], row, rtol=1e-4, atol=1e-6)


def test_detect_windows_takes_a_generator(model, images):
    detector = Detector(model.model_file, model.weights_file)
    name = next(iter(images))
    detections = detector.detect_windows((n, [(0, 0, 4, 4)]) for n in [name])
    assert len(detections) == 1 and detections[0]["filename"] == name


def test_context_crop_inside_the_image(model):
    """context_pad 1 on a 4-pixel input: scale 4 / (4 - 2) = 2. The window (2, 2, 5, 5) of an
    8 x 8 image grows about its centre (4, 4) to the box (0, 0, 8, 8), which fills the crop."""
    detector = Detector(model.model_file, model.weights_file, context_pad=1)
    image = np.random.default_rng(0).random((8, 8, 3)).astype(np.float32)
    crop = detector.crop(image, np.array([2, 2, 5, 5]))
    close_to(crop, caffe_io.resize_image(image, (4, 4)), rtol=1e-6)


def test_context_crop_at_the_border_pads_with_the_raw_mean(model):
    """The window (0, 0, 3, 3) grows to (-2, -2, 6, 6): 9 pixels map to 4, so the 2 pixels
    above/left become round(2 * 4/9) = 1 row/column of mean; the clipped box (0, 0, 6, 6)
    fills the rest, round(7 * 4/9) = 3 pixels. The mean is in raw space: un-swapped channels
    (RGB) divided by raw_scale, so that preprocessing turns the padding into zeros."""
    detector = Detector(model.model_file, model.weights_file, mean=MEAN, raw_scale=255,
                        channel_swap=BGR, context_pad=1)
    np.testing.assert_allclose(detector.crop_mean.reshape(3), MEAN[::-1] / 255, rtol=1e-6)
    image = np.random.default_rng(1).random((8, 8, 3)).astype(np.float32)
    crop = detector.crop(image, np.array([0, 0, 3, 3]))
    assert crop.shape == (4, 4, 3)
    np.testing.assert_allclose(crop[0], np.tile(MEAN[::-1] / 255, (4, 1)), rtol=1e-6)
    np.testing.assert_allclose(crop[:, 0], np.tile(MEAN[::-1] / 255, (4, 1)), rtol=1e-6)
    close_to(crop[1:, 1:], caffe_io.resize_image(image[0:6, 0:6], (3, 3)), rtol=1e-6)
    padded = detector.transformer.preprocess("data", crop)
    np.testing.assert_allclose(padded[:, 0, :], 0, atol=1e-4)


def test_context_crop_without_mean_pads_with_zeros(model):
    detector = Detector(model.model_file, model.weights_file, context_pad=1)
    np.testing.assert_array_equal(detector.crop_mean, np.zeros((4, 4, 3)))
    crop = detector.crop(np.ones((8, 8, 3), np.float32), np.array([0, 0, 3, 3]))
    np.testing.assert_array_equal(crop[0], 0)
    np.testing.assert_allclose(crop[1:, 1:], 1, rtol=1e-6)


def test_context_windows_are_classified(model, images):
    detector = Detector(model.model_file, model.weights_file, context_pad=1)
    name, pixels = next(iter(images.items()))
    detections = detector.detect_windows([(name, [np.array([2, 2, 5, 5])])])
    expected = model.probabilities(preprocess(caffe_io.resize_image(pixels, (4, 4)))[None])
    np.testing.assert_allclose(detections[0]["prediction"], expected[0], rtol=1e-4,
                               atol=1e-6)


def test_window_outside_the_image(model):
    detector = Detector(model.model_file, model.weights_file, context_pad=1)
    with pytest.raises(ValueError, match="no pixels inside the 8 x 8 image"):
        detector.crop(np.zeros((8, 8, 3), np.float32), np.array([20, 20, 24, 24]))


def test_selective_search_uses_the_external_module(model, images, monkeypatch, tmp_path):
    calls = []

    def get_windows(image_fnames, cmd):
        calls.append((list(image_fnames), cmd))
        return [np.array([[0, 0, 4, 4], [1, 2, 5, 6]]) for _ in image_fnames]

    module = types.ModuleType("selective_search_ijcv_with_python")
    module.get_windows = get_windows
    monkeypatch.setitem(sys.modules, "selective_search_ijcv_with_python", module)
    monkeypatch.chdir(tmp_path)
    detector = Detector(model.model_file, model.weights_file)
    detections = detector.detect_selective_search(["a.png"])
    assert calls == [([os.path.abspath("a.png")], "selective_search_rcnn")]
    assert len(detections) == 2
    direct = detector.detect_windows([(os.path.abspath("a.png"), [np.array([0, 0, 4, 4]),
                                                                  np.array([1, 2, 5, 6])])])
    for mine, theirs in zip(detections, direct):
        close_to(mine["prediction"], theirs["prediction"], rtol=1e-6)


def test_selective_search_without_the_module(model, monkeypatch):
    monkeypatch.setitem(sys.modules, "selective_search_ijcv_with_python", None)
    detector = Detector(model.model_file, model.weights_file)
    with pytest.raises(ImportError, match="selective_search_ijcv_with_python module"):
        detector.detect_selective_search(["a.png"])
