"""A tiny image classifier (random weights saved by the engine) and a plain-numpy reference
of Caffe's preprocessing and forward pass, shared by the Classifier, Detector and
scripts/classify.py tests."""
import numpy as np
from PIL import Image

from pycaffe_cli.net.net import Net as EngineNet
from pycaffe_cli.net.weights import save_binaryproto
from pycaffe_cli.proto import caffe_pb2

CLASSES = 5


def deploy_text(batch=4, channels=3, height=4, width=4):
    """Input (batch x channels x height x width) -> InnerProduct(5) -> Softmax "prob"."""
    return f"""
name: "tiny_classifier"
layer {{ name: "data" type: "Input" top: "data"
  input_param {{ shape {{ dim: {batch} dim: {channels} dim: {height} dim: {width} }} }} }}
layer {{ name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param {{ num_output: {CLASSES} weight_filler {{ type: "gaussian" std: 0.5 }}
    bias_filler {{ type: "gaussian" std: 0.5 }} }} }}
layer {{ name: "prob" type: "Softmax" bottom: "ip" top: "prob" }}
"""


class TinyModel:
    """The prototxt and caffemodel paths, and the weights in them (W, b)."""

    def __init__(self, folder, **shape):
        self.model_file = str(folder / "deploy.prototxt")
        self.weights_file = str(folder / "tiny.caffemodel")
        with open(self.model_file, "w") as stream:
            stream.write(deploy_text(**shape))
        net = EngineNet.from_file(self.model_file, caffe_pb2.TEST)
        save_binaryproto(net, self.weights_file)
        ip = net.layer_by_name("ip")
        self.weight = ip.blobs[0].data.astype(np.float64)
        self.bias = ip.blobs[1].data.astype(np.float64)

    def probabilities(self, caffe_in):
        """Softmax(W x + b) for each preprocessed N x K x H x W input, in float64."""
        logits = caffe_in.reshape(len(caffe_in), -1).astype(np.float64) @ self.weight.T
        logits += self.bias
        exp = np.exp(logits - logits.max(axis=1, keepdims=True))
        return exp / exp.sum(axis=1, keepdims=True)


def preprocess(image, channel_swap=None, raw_scale=None, mean=None, input_scale=None):
    """Caffe's Transformer.preprocess for an H x W x K image already at the input size:
    K x H x W, channels reordered, times raw_scale, minus mean, times input_scale."""
    x = np.asarray(image, np.float64).transpose(2, 0, 1)
    if channel_swap is not None:
        x = x[list(channel_swap)]
    if raw_scale is not None:
        x = x * raw_scale
    if mean is not None:
        mean = np.asarray(mean, np.float64)
        x = x - (mean[:, None, None] if mean.ndim == 1 else mean)
    if input_scale is not None:
        x = x * input_scale
    return x


def ten_crops(image, crop_h, crop_w):
    """The four corner crops and the centre crop of an H x W x K image, then their mirrors
    (left-right), the order caffe.io.oversample gives."""
    height, width = image.shape[:2]
    corners = [(0, 0), (0, width - crop_w), (height - crop_h, 0),
               (height - crop_h, width - crop_w)]
    top, left = int(height / 2.0 - crop_h / 2.0), int(width / 2.0 - crop_w / 2.0)
    crops = [image[y:y + crop_h, x:x + crop_w] for y, x in corners + [(top, left)]]
    return crops + [crop[:, ::-1] for crop in crops]


def random_images(count, height, width, seed=0):
    """float32 images with values in [0, 1], as caffe.io.load_image returns them."""
    rng = np.random.default_rng(seed)
    return [rng.random((height, width, 3)).astype(np.float32) for _ in range(count)]


def save_png(path, rgb_bytes):
    Image.fromarray(rgb_bytes, "RGB").save(path)
    return str(path)
