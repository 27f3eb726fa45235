"""Shared helpers for layer tests: build a layer from prototxt text, wrap arrays as blobs."""
import numpy as np
from google.protobuf import text_format

from pycaffe_cli.blob import Blob
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.proto import caffe_pb2


def layer_param(text, phase=caffe_pb2.TRAIN):
    """Parse LayerParameter prototxt text (``name: "x" type: "ReLU" ...``)."""
    param = text_format.Parse(text, caffe_pb2.LayerParameter())
    if not param.HasField("phase"):
        param.phase = phase
    return param


def blob_of(array):
    """A Blob holding a float32 copy of ``array``."""
    array = np.asarray(array, dtype=np.float32)
    blob = Blob(array.shape)
    blob.data[...] = array
    return blob


def empty_blobs(n):
    return [Blob() for _ in range(n)]


def set_up(text, bottoms, num_tops=1, phase=caffe_pb2.TRAIN):
    """Create and set up a layer; return (layer, bottom blobs, top blobs)."""
    layer = create_layer(layer_param(text, phase))
    bottom = [b if isinstance(b, Blob) else blob_of(b) for b in bottoms]
    top = empty_blobs(num_tops)
    layer.setup(bottom, top)
    return layer, bottom, top


def no_ties(rng, shape, low=-1.0, high=1.0):
    """Random float32 values with no two equal, for max-like operations."""
    count = int(np.prod(shape))
    values = np.linspace(low, high, count, dtype=np.float64)
    return rng.permutation(values).reshape(shape).astype(np.float32)
