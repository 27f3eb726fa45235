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


def c_round(value):
    """C's round() (halves away from zero), as a float: the ROI layers' coordinate rounding."""
    return float(np.sign(value) * np.floor(abs(float(value)) + 0.5))


def no_ties(rng, shape, low=-1.0, high=1.0):
    """Random float32 values with no two equal, for max-like operations."""
    count = int(np.prod(shape))
    values = np.linspace(low, high, count, dtype=np.float64)
    return rng.permutation(values).reshape(shape).astype(np.float32)


# A second in-place layer that changes every value (y = 2 x - 1), to catch layers whose
# backward reads top data that a later in-place layer has overwritten.
SHIFT_DOWN = 'name: "affine" type: "Power" power_param { scale: 2 shift: -1 }'


def run_chain(texts, x, dy, in_place):
    """Forward then backward through layers applied one after another, either all in place on
    one blob or each into a new blob; return the output and the gradient reaching x."""
    layers = [create_layer(layer_param(text)) for text in texts]
    blobs = [blob_of(x)]
    for layer in layers:
        top = blobs[-1] if in_place else Blob()
        layer.setup([blobs[-1]], [top])
        blobs.append(top)
    for layer, bottom, top in zip(layers, blobs, blobs[1:]):
        layer.forward([bottom], [top])
    y = blobs[-1].data.copy()
    blobs[-1].diff[...] = dy
    for layer, bottom, top in reversed(list(zip(layers, blobs, blobs[1:]))):
        layer.backward([top], [True], [bottom])
    return y, blobs[0].diff.copy()


def assert_in_place_matches(texts, x, dy):
    """Run the chain out of place and in place; assert identical outputs and gradients.

    Returns:
        [(y, dx) out of place, (y, dx) in place].
    """
    results = [run_chain(texts, x, dy, in_place) for in_place in (False, True)]
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])
    return results


def uniform_data(shape, seed=0):
    """float32 values uniform in [-1, 1)."""
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def broadcast(operand, x_ndim, axis):
    """``operand`` reshaped to line up with an x of ``x_ndim`` axes from ``axis`` on."""
    return operand.reshape((1,) * axis + operand.shape + (1,) * (x_ndim - axis
                                                                 - operand.ndim))
