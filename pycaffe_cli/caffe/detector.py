"""``caffe.Detector``: windowed detection by classifying many crops of images at once.

BVLC's python/caffe/detector.py, after R-CNN (Girshick, Donahue, Darrell, Malik: "Rich feature
hierarchies for accurate object detection and semantic segmentation",
http://arxiv.org/abs/1311.2524): each window is cut out of its image (optionally with a
border of surrounding context), warped to the net's input size and classified.

Window proposals by Selective Search need the external ``selective_search_ijcv_with_python``
module (https://github.com/sergeyk/selective_search_ijcv_with_python, which runs MATLAB); it
is imported only when ``detect_selective_search`` is called.
"""
import os

import numpy as np

from caffe import io as caffe_io
from caffe.classifier import configure_transformer
from caffe.pycaffe import Net
from pycaffe_cli.proto import caffe_pb2

SELECTIVE_SEARCH_MODULE = "selective_search_ijcv_with_python"
SELECTIVE_SEARCH_URL = "https://github.com/sergeyk/selective_search_ijcv_with_python"


class Detector(Net):
    """A TEST-phase Net for windowed detection over given windows or Selective Search
    proposals.

    Args:
        model_file: the deploy prototxt; its first input is the image blob.
        pretrained_file: the trained weights (.caffemodel or .h5).
        mean, input_scale, raw_scale, channel_swap: preprocessing, as for
            ``caffe.Classifier``.
        context_pad: pixels of surrounding context, so that a ``context_pad``-wide border of
            the net's input is context around the window, as in R-CNN feature extraction.
    """

    def __init__(self, model_file, pretrained_file, mean=None, input_scale=None,
                 raw_scale=None, channel_swap=None, context_pad=None):
        Net.__init__(self, model_file, caffe_pb2.TEST, weights=pretrained_file)
        self.transformer = configure_transformer(
            self, mean=mean, input_scale=input_scale, raw_scale=raw_scale,
            channel_swap=channel_swap)
        self.configure_crop(context_pad)

    def detect_windows(self, images_windows):
        """Classify the given windows of the given images, each warped to the input size.

        Args:
            images_windows: an iterable of (image filename, windows) pairs; a window is
                (ymin, xmin, ymax, xmax) in pixels.

        Returns:
            A list of {'window': window, 'prediction': the net's first output for it,
            'filename': image filename} dicts, in the order given.
        """
        images_windows = [(name, list(windows)) for name, windows in images_windows]
        window_inputs = []
        for image_fname, windows in images_windows:
            image = caffe_io.load_image(image_fname).astype(np.float32)
            for window in windows:
                window_inputs.append(self.crop(image, window))
        if not window_inputs:
            raise ValueError("detect_windows: no windows to classify")
        in_ = self.inputs[0]
        caffe_in = np.zeros((len(window_inputs), window_inputs[0].shape[2])
                            + tuple(self.blobs[in_].data.shape[2:]), dtype=np.float32)
        for ix, window_in in enumerate(window_inputs):
            caffe_in[ix] = self.transformer.preprocess(in_, window_in)
        out = self.forward_all(**{in_: caffe_in})
        predictions = out[self.outputs[0]]
        detections = []
        for image_fname, windows in images_windows:
            for window in windows:
                detections.append({"window": window, "prediction": predictions[len(detections)],
                                   "filename": image_fname})
        return detections

    def detect_selective_search(self, image_fnames):
        """Classify the Selective Search proposals of each image (see ``detect_windows``).

        Raises:
            ImportError: the selective_search_ijcv_with_python module is not installed.
        """
        selective_search = _import_selective_search()
        # absolute paths, so that MATLAB finds the files from its own working folder
        image_fnames = [os.path.abspath(f) for f in image_fnames]
        windows_list = selective_search.get_windows(image_fnames, cmd="selective_search_rcnn")
        return self.detect_windows(zip(image_fnames, windows_list))

    def crop(self, im, window):
        """Cut ``window`` out of ``im``, with surrounding context when ``context_pad`` is set.

        Args:
            im: an H x W x K image.
            window: (ymin, xmin, ymax, xmax).

        Returns:
            The window's pixels; with context padding, a crop_dims array holding the window
            and its context, warped so that the context fills a ``context_pad`` border, and
            the part outside the image filled with the mean (``crop_mean``).
        """
        window = np.asarray(window)
        if not self.context_pad:
            ymin, xmin, ymax, xmax = (int(v) for v in window[:4])
            crop = im[ymin:ymax, xmin:xmax]
            if crop.size == 0:
                raise _empty_window(window, im)
            return crop
        return self._context_crop(im, window)

    def _context_crop(self, im, window):
        crop_size = self.blobs[self.inputs[0]].data.shape[3]  # the input is assumed square
        scale = crop_size / (1.0 * crop_size - self.context_pad * 2)
        half_h = (window[2] - window[0] + 1) / 2.0
        half_w = (window[3] - window[1] + 1) / 2.0
        center = (window[0] + half_h, window[1] + half_w)
        box = np.round(np.tile(center, 2) + scale * np.array((-half_h, -half_w, half_h, half_w)))
        scale_h = crop_size / (box[2] - box[0] + 1)
        scale_w = crop_size / (box[3] - box[1] + 1)
        pad_y = round(max(0, -box[0]) * scale_h)  # the part of the box above the image
        pad_x = round(max(0, -box[1]) * scale_w)
        im_h, im_w = im.shape[:2]
        box = np.clip(box, 0.0, [im_h, im_w, im_h, im_w])
        if box[2] <= box[0] or box[3] <= box[1]:
            raise _empty_window(window, im)
        clip_h, clip_w = box[2] - box[0] + 1, box[3] - box[1] + 1
        crop_h = min(round(clip_h * scale_h), crop_size - pad_y)
        crop_w = min(round(clip_w * scale_w), crop_size - pad_x)
        ymin, xmin, ymax, xmax = box.astype(int)
        context = caffe_io.resize_image(im[ymin:ymax, xmin:xmax], (crop_h, crop_w))
        crop = np.ones(self.crop_dims, dtype=np.float32) * self.crop_mean
        crop[pad_y:pad_y + crop_h, pad_x:pad_x + crop_w] = context
        return crop

    def configure_crop(self, context_pad):
        """Set ``crop_dims`` (the input's H x W x K) and the context padding.

        With context padding, also make ``crop_mean``: the transformer's mean taken back
        to raw image space (H x W x K order, channels un-swapped, divided by the raw scale),
        which fills the parts of a context crop that fall outside the image.
        """
        in_ = self.inputs[0]
        inverse = np.argsort(self.transformer.transpose[in_])
        self.crop_dims = np.array(self.blobs[in_].data.shape[1:])[inverse]
        self.context_pad = context_pad
        if self.context_pad:
            self.crop_mean = self._raw_mean(inverse)

    def _raw_mean(self, inverse_transpose):
        in_ = self.inputs[0]
        mean = self.transformer.mean.get(in_)
        if mean is None:
            return np.zeros(self.crop_dims, dtype=np.float32)
        crop_mean = np.array(mean, dtype=np.float32).transpose(inverse_transpose)
        channel_order = self.transformer.channel_swap.get(in_)
        if channel_order is not None:
            order = list(channel_order)
            crop_mean = crop_mean[:, :, [order.index(i) for i in range(crop_mean.shape[2])]]
        raw_scale = self.transformer.raw_scale.get(in_)
        if raw_scale is not None:
            crop_mean /= raw_scale
        return crop_mean


def _empty_window(window, im):
    return ValueError(f"crop: window {np.asarray(window).tolist()} has no pixels inside the "
                      f"{im.shape[0]} x {im.shape[1]} image")


def _import_selective_search():
    try:
        import selective_search_ijcv_with_python
    except ImportError as error:
        raise ImportError(
            f"Detector.detect_selective_search needs the {SELECTIVE_SEARCH_MODULE} module "
            f"({SELECTIVE_SEARCH_URL}, which also needs MATLAB) on the Python path; install "
            "it, or pass your own windows to detect_windows") from error
    return selective_search_ijcv_with_python
