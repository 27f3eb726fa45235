"""``caffe.Classifier``: a Net that preprocesses images and predicts class probabilities.

BVLC's python/caffe/classifier.py: images (H x W x K, values in [0, 1] as
``caffe.io.load_image`` gives them) are resized to ``image_dims``, cropped to the net's input
size (the centre, or the centre and four corners plus their mirrors, whose predictions are
averaged), preprocessed by a ``caffe.io.Transformer`` and run through the net.
"""
import numpy as np

from caffe import io as caffe_io
from caffe.pycaffe import Net
from pycaffe_cli.proto import caffe_pb2

OVERSAMPLED_CROPS = 10  # centre + 4 corners, and the mirror of each


class Classifier(Net):
    """A TEST-phase Net for image class prediction by scaling, centre cropping or
    oversampling.

    Args:
        model_file: the deploy prototxt; its first input is the image blob.
        pretrained_file: the trained weights (.caffemodel or .h5).
        image_dims: (height, width) images are resized to before cropping; default the
            net's input size (a whole-image "crop").
        mean: the mean to subtract, as ``Transformer.set_mean`` takes it (K or K x H x W).
        input_scale: scale applied after mean subtraction.
        raw_scale: scale applied to the raw [0, 1] image (255 for nets trained on bytes).
        channel_swap: channel order, e.g. (2, 1, 0) to turn RGB into BGR.
    """

    def __init__(self, model_file, pretrained_file, image_dims=None, mean=None,
                 input_scale=None, raw_scale=None, channel_swap=None):
        Net.__init__(self, model_file, caffe_pb2.TEST, weights=pretrained_file)
        in_ = self.inputs[0]
        self.transformer = configure_transformer(
            self, mean=mean, input_scale=input_scale, raw_scale=raw_scale,
            channel_swap=channel_swap)
        self.crop_dims = np.array(self.blobs[in_].data.shape[2:])
        if image_dims is None or len(image_dims) == 0:
            image_dims = self.crop_dims
        self.image_dims = image_dims

    def predict(self, inputs, oversample=True):
        """Predict the class probabilities of ``inputs``.

        Args:
            inputs: a sequence of H x W x K images (ndarrays).
            oversample: average the predictions of the centre crop, the four corner crops
                and their mirrors (default); False predicts from the centre crop alone.

        Returns:
            An N x C array: the net's first output for each of the N images.

        Raises:
            ValueError: no inputs, or an input that is not an H x W x K image.
        """
        _check_images(inputs)
        resized = np.zeros((len(inputs), self.image_dims[0], self.image_dims[1],
                            inputs[0].shape[2]), dtype=np.float32)
        for ix, image in enumerate(inputs):
            resized[ix] = caffe_io.resize_image(image, self.image_dims)
        if oversample:
            crops = caffe_io.oversample(resized, self.crop_dims)
        else:
            crops = center_crop(resized, self.image_dims, self.crop_dims)
        in_ = self.inputs[0]
        caffe_in = np.zeros(np.array(crops.shape)[[0, 3, 1, 2]], dtype=np.float32)
        for ix, crop in enumerate(crops):
            caffe_in[ix] = self.transformer.preprocess(in_, crop)
        out = self.forward_all(**{in_: caffe_in})
        predictions = out[self.outputs[0]]
        if oversample:
            predictions = predictions.reshape((len(predictions) // OVERSAMPLED_CROPS,
                                               OVERSAMPLED_CROPS, -1))
            predictions = predictions.mean(1)
        return predictions


def configure_transformer(net, mean=None, input_scale=None, raw_scale=None,
                          channel_swap=None):
    """A Transformer for ``net``'s first input: H x W x K images to K x H x W, then the
    given channel swap, raw scale, mean and input scale (each skipped when None)."""
    in_ = net.inputs[0]
    transformer = caffe_io.Transformer({in_: net.blobs[in_].data.shape})
    transformer.set_transpose(in_, (2, 0, 1))
    if mean is not None:
        transformer.set_mean(in_, mean)
    if input_scale is not None:
        transformer.set_input_scale(in_, input_scale)
    if raw_scale is not None:
        transformer.set_raw_scale(in_, raw_scale)
    if channel_swap is not None:
        transformer.set_channel_swap(in_, channel_swap)
    return transformer


def center_crop(images, image_dims, crop_dims):
    """The central crop_dims window of each N x H x W x K image (bounds truncated to int,
    as Caffe computes them: centre +- half the crop)."""
    center = np.array(image_dims) / 2.0
    half = np.asarray(crop_dims) / 2.0
    top, left, bottom, right = np.concatenate([center - half, center + half]).astype(int)
    return images[:, top:bottom, left:right, :]


def _check_images(inputs):
    if len(inputs) == 0:
        raise ValueError("predict: no inputs to classify")
    for ix, image in enumerate(inputs):
        if np.ndim(image) != 3:
            raise ValueError(f"predict: input {ix} has shape {np.shape(image)}; expected an "
                             "H x W x K image")
        if np.shape(image)[2] != np.shape(inputs[0])[2]:
            raise ValueError(f"predict: input {ix} has {np.shape(image)[2]} channels; input "
                             f"0 has {np.shape(inputs[0])[2]}")
