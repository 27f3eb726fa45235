"""A small deploy net, its weights and a test image, all made from formulas (no random
generator), so BVLC Caffe and pycaffe can be given byte-identical files; the numbers BVLC Caffe
computed from them are pinned in test_real_client.py."""
import numpy as np
from PIL import Image

DEPLOY = """name: "client"
layer { name: "data" type: "Input" top: "data"
  input_param { shape { dim: 2 dim: 3 dim: 16 dim: 16 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
  convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip"
  inner_product_param { num_output: 5 } }
layer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" }
"""
IMAGE_SHAPE = (21, 27)   # height, width: resized (shrunk) to the net's 16 x 16


def formula(shape, phase):
    """Deterministic values in [-1, 1] for an array of ``shape``."""
    index = np.arange(int(np.prod(shape)), dtype=np.float64)
    return np.sin(index * 0.731 + phase).reshape(shape)


def image_pixels():
    """An RGB uint8 image: smooth gradients plus a sharp-edged square."""
    rows, cols = np.mgrid[0:IMAGE_SHAPE[0], 0:IMAGE_SHAPE[1]]
    red = 255 * rows / (IMAGE_SHAPE[0] - 1)
    green = 255 * cols / (IMAGE_SHAPE[1] - 1)
    blue = 128 + 100 * np.sin(rows * 0.9) * np.cos(cols * 0.4)
    pixels = np.stack([red, green, blue], axis=2)
    pixels[5:12, 8:17] = (250, 20, 60)
    return np.round(pixels).astype(np.uint8)


def write_client_files(folder):
    """deploy.prototxt, weights.caffemodel and image.png in ``folder`` (made with pycaffe's
    own ``caffe``); returns their paths."""
    import caffe
    deploy = f"{folder}/deploy.prototxt"
    with open(deploy, "w") as stream:
        stream.write(DEPLOY)
    net = caffe.Net(deploy, caffe.TEST)
    for k, (name, blobs) in enumerate(net.params.items()):
        for j, blob in enumerate(blobs):
            blob.data[...] = 0.05 * formula(blob.data.shape, phase=k + 0.5 * j)
    weights = f"{folder}/weights.caffemodel"
    net.save(weights)
    image = f"{folder}/image.png"
    Image.fromarray(image_pixels()).save(image)
    return deploy, weights, image
