"""caffe.Classifier: BVLC's preprocessing (resize, crops, transformer) and predictions,
checked against a numpy reference of the same steps and the net's weights."""
import numpy as np
import pytest

from caffe import io as caffe_io
from caffe.classifier import Classifier
from caffe.pycaffe import Net
from tests.caffe_api.image_nets import (CLASSES, TinyModel, preprocess, random_images,
                                        ten_crops)

MEAN = np.array([104.0, 117.0, 123.0])
BGR = (2, 1, 0)


@pytest.fixture
def model(tmp_path):
    return TinyModel(tmp_path)  # input 4 x 3 x 4 x 4, 5 classes


def test_is_a_test_phase_net_with_a_transformer(model):
    classifier = Classifier(model.model_file, model.weights_file)
    assert isinstance(classifier, Net)
    assert classifier.inputs == ["data"] and classifier.outputs == ["prob"]
    np.testing.assert_array_equal(classifier.crop_dims, [4, 4])
    np.testing.assert_array_equal(classifier.image_dims, [4, 4])  # default: the input size
    np.testing.assert_allclose(classifier.params["ip"][0].data, model.weight)
    assert classifier.transformer.transpose["data"] == (2, 0, 1)
    for table in ("mean", "raw_scale", "input_scale", "channel_swap"):
        assert "data" not in getattr(classifier.transformer, table)


def test_center_only_whole_image(model):
    """image_dims = input size: one prediction per image from the whole (resized) image."""
    images = random_images(3, 4, 4)
    classifier = Classifier(model.model_file, model.weights_file, mean=MEAN,
                            raw_scale=255.0, channel_swap=BGR, input_scale=0.01)
    predictions = classifier.predict(images, oversample=False)
    caffe_in = np.stack([preprocess(im, BGR, 255.0, MEAN, 0.01) for im in images])
    assert predictions.shape == (3, CLASSES)
    np.testing.assert_allclose(predictions, model.probabilities(caffe_in), rtol=1e-4,
                               atol=1e-6)


def test_oversample_averages_ten_crops(model):
    """6x6 images, 4x4 input: corners, centre and mirrors, 10 predictions averaged; 20 crops
    run through the 4-batch net in 5 forward passes."""
    images = random_images(2, 6, 6, seed=1)
    classifier = Classifier(model.model_file, model.weights_file, image_dims=(6, 6),
                            raw_scale=255.0, mean=MEAN)
    predictions = classifier.predict(images)
    expected = []
    for image in images:
        crops = np.stack([preprocess(c, None, 255.0, MEAN) for c in ten_crops(image, 4, 4)])
        expected.append(model.probabilities(crops).mean(axis=0))
    np.testing.assert_allclose(predictions, np.stack(expected), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(predictions.sum(axis=1), 1.0, rtol=1e-5)


def test_center_crop_bounds_truncate(model):
    """7x7 -> 4x4: the centre window is rows/cols int(3.5 - 2) = 1 to int(3.5 + 2) = 5."""
    image = random_images(1, 7, 7, seed=2)[0]
    classifier = Classifier(model.model_file, model.weights_file, image_dims=[7, 7])
    predictions = classifier.predict([image], oversample=False)
    expected = model.probabilities(preprocess(image[1:5, 1:5])[None])
    np.testing.assert_allclose(predictions, expected, rtol=1e-4, atol=1e-6)


def test_inputs_are_resized_to_image_dims(model):
    """A 5 x 8 image is resized to image_dims (caffe.io.resize_image) before cropping."""
    image = random_images(1, 5, 8, seed=3)[0]
    classifier = Classifier(model.model_file, model.weights_file, image_dims=(6, 6),
                            channel_swap=BGR)
    resized = caffe_io.resize_image(image, (6, 6))
    assert resized.shape == (6, 6, 3)
    crops = np.stack([preprocess(c, BGR) for c in ten_crops(resized, 4, 4)])
    expected = model.probabilities(crops).mean(axis=0)[None]
    np.testing.assert_allclose(classifier.predict([image]), expected, rtol=1e-4, atol=1e-6)
    center = model.probabilities(preprocess(resized[1:5, 1:5], BGR)[None])
    np.testing.assert_allclose(classifier.predict([image], False), center, rtol=1e-4,
                               atol=1e-6)


def test_elementwise_mean(model):
    mean = np.arange(48, dtype=np.float32).reshape(3, 4, 4)
    image = random_images(1, 4, 4, seed=4)[0]
    classifier = Classifier(model.model_file, model.weights_file, mean=mean, raw_scale=255)
    expected = model.probabilities(preprocess(image, None, 255, mean)[None])
    np.testing.assert_allclose(classifier.predict([image], oversample=False), expected,
                               rtol=1e-4, atol=1e-6)


def test_an_ndarray_of_images_is_accepted(model):
    images = np.stack(random_images(2, 4, 4, seed=5))
    classifier = Classifier(model.model_file, model.weights_file, image_dims=np.array([4, 4]))
    expected = model.probabilities(np.stack([preprocess(im) for im in images]))
    np.testing.assert_allclose(classifier.predict(images, False), expected, rtol=1e-4,
                               atol=1e-6)


@pytest.mark.parametrize("inputs, message", [
    ([], "no inputs"),
    ([np.zeros((4, 4))], "input 0 has shape (4, 4)"),
    ([np.zeros((4, 4, 3)), np.zeros((4, 4, 1))], "input 1 has 1 channels"),
])
def test_bad_inputs(model, inputs, message):
    classifier = Classifier(model.model_file, model.weights_file)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        classifier.predict(inputs)


@pytest.mark.parametrize("mean", [np.zeros(4), np.zeros((2, 4, 4))])
def test_mean_of_the_wrong_channels_is_refused(model, mean):
    with pytest.raises(ValueError, match="channels"):
        Classifier(model.model_file, model.weights_file, mean=mean)
