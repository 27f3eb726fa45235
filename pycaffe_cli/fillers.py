"""Fillers: initial values for learnable blobs and DummyData tops (Caffe's filler.hpp).

A caffe.FillerParameter names the filler (``type``) and its settings. Every random draw comes
from ``backend.rng()`` so a solver's ``random_seed`` makes initialisation repeatable.

Fans, as Caffe computes them for a blob of shape (s0, s1, ...) with ``count`` elements:
``fan_in = count / s0`` and ``fan_out = count / s1`` (``count`` for a 1-axis blob).
"""
import math

import numpy as np

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError, layer_error
from pycaffe_cli.proto import caffe_pb2


def fill(blob, filler_param, layer_name=None):
    """Fill ``blob.data`` as the caffe.FillerParameter ``filler_param`` says.

    Args:
        blob: the Blob to fill (its data is overwritten).
        filler_param: a caffe.FillerParameter.
        layer_name: the layer the blob belongs to, named in error messages.

    Raises:
        CaffeError: an unknown filler type or settings Caffe rejects.
    """
    make_filler(filler_param, layer_name)(blob)


def make_filler(filler_param, layer_name=None):
    """Return a function ``f(blob)`` that fills a blob as ``filler_param`` says.

    The filler type is checked here, so a bad prototxt fails at setup even before any fill.
    """
    kind = filler_param.type
    function = _FILLERS.get(kind)
    if function is None:
        known = ", ".join(f'"{name}"' for name in _FILLERS)
        raise _error(layer_name, f'unknown filler type "{kind}" (known fillers: {known})')

    def filler(blob):
        if blob.count() == 0:
            raise _error(layer_name, f'the "{kind}" filler cannot fill an empty blob '
                                     f"(shape {blob.shape_string()})")
        if kind != "gaussian" and filler_param.sparse != -1:
            raise _error(layer_name, f'sparse is not supported by the "{kind}" filler '
                                     "(only gaussian)")
        blob.data[...] = function(blob.shape, filler_param, layer_name)
    return filler


def _error(layer_name, message):
    return layer_error(layer_name, message) if layer_name else CaffeError(message)


def _constant(shape, p, layer_name):
    """x = value."""
    return np.full(shape, p.value, dtype=np.float32)


def _uniform(shape, p, layer_name):
    """x ~ U(min, max)."""
    if p.min > p.max:
        raise _error(layer_name, f"uniform filler needs min <= max (got min {p.min:g}, "
                                 f"max {p.max:g})")
    return _draw_uniform(shape, p.min, p.max)


def _gaussian(shape, p, layer_name):
    """x ~ N(mean, std^2); with ``sparse`` >= 0 each value survives with probability
    sparse / shape[0] (Caffe's sparse weight matrices: ``sparse`` non-zero inputs per output on
    average), the rest are set to 0."""
    data = _draw_gaussian(shape, p.mean, p.std, layer_name)
    if p.sparse < -1:
        raise _error(layer_name, f"gaussian filler sparse must be >= -1, got {p.sparse}")
    if p.sparse >= 0:
        if len(shape) < 1:
            raise _error(layer_name, "sparse gaussian filler needs a blob with at least 1 axis")
        keep = np.float32(p.sparse) / np.float32(shape[0])
        if keep > 1:
            raise _error(layer_name, f"gaussian filler sparse ({p.sparse}) must not exceed "
                                     f"the number of outputs ({shape[0]})")
        data *= backend.rng().random(shape) < keep
    return data


def _positive_unitball(shape, p, layer_name):
    """x ~ U(0, 1), then each of the shape[0] rows (count / shape[0] values) divided by its
    sum, so every row is a point of the positive unit simplex."""
    data = _draw_uniform(shape, 0.0, 1.0)
    rows = data.reshape(shape[0], -1)
    rows /= rows.sum(axis=1, dtype=np.float32, keepdims=True)
    return data


def _variance_n(shape, p):
    """Caffe's n for xavier/msra: fan_in, fan_out or their average (variance_norm)."""
    count = int(np.prod(shape))
    fan_in = count // shape[0]
    fan_out = count // shape[1] if len(shape) > 1 else count
    if p.variance_norm == caffe_pb2.FillerParameter.AVERAGE:
        return np.float32((fan_in + fan_out) / 2.0)
    if p.variance_norm == caffe_pb2.FillerParameter.FAN_OUT:
        return np.float32(fan_out)
    return np.float32(fan_in)


def _xavier(shape, p, layer_name):
    """x ~ U(-a, a) with a = sqrt(3 / n) (Glorot and Bengio 2010)."""
    scale = float(np.sqrt(np.float32(3) / _variance_n(shape, p)))
    return _draw_uniform(shape, -scale, scale)


def _msra(shape, p, layer_name):
    """x ~ N(0, 2 / n) (He et al. 2015)."""
    std = float(np.sqrt(np.float32(2) / _variance_n(shape, p)))
    return _draw_gaussian(shape, 0.0, std, layer_name)


def _bilinear(shape, p, layer_name):
    """Bilinear upsampling kernel for a (C, 1, K, K) Deconvolution weight, the same K x K
    kernel in every channel: with f = ceil(K / 2) and c = (2f - 1 - f % 2) / 2f,
    w(y, x) = (1 - |x / f - c|) (1 - |y / f - c|)."""
    if len(shape) != 4:
        raise _error(layer_name, f"bilinear filler needs a 4-axis blob, got shape {shape}")
    height, width = shape[2], shape[3]
    if height != width:
        raise _error(layer_name, f"bilinear filler needs a square kernel, got "
                                 f"{height} x {width}")
    f = math.ceil(width / 2.0)
    c = np.float32((2 * f - 1 - f % 2) / (2.0 * f))
    x = np.arange(width, dtype=np.float32)
    weights = np.float32(1) - np.abs(x / np.float32(f) - c)
    kernel = np.outer(weights, weights)
    return np.broadcast_to(kernel, shape).astype(np.float32)


def _draw_uniform(shape, low, high):
    # Caffe draws from [low, high] (it widens the upper end by one ulp); so may we
    return backend.rng().uniform(low, high, shape).astype(np.float32)


def _draw_gaussian(shape, mean, std, layer_name):
    if not std > 0:
        raise _error(layer_name, f"gaussian draws need std > 0, got {std:g}")
    return backend.rng().normal(mean, std, shape).astype(np.float32)


_FILLERS = {
    "constant": _constant,
    "gaussian": _gaussian,
    "positive_unitball": _positive_unitball,
    "uniform": _uniform,
    "xavier": _xavier,
    "msra": _msra,
    "bilinear": _bilinear,
}
