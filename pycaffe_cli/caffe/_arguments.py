"""Checks on what ``caffe.io.Transformer``'s settings are given, made when a setting is made
(BVLC stores anything and fails, or computes garbage, at the first ``preprocess``)."""
import math
import numbers

import numpy as np


def _is_integer(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_input_shape(in_, shape):
    """An input's shape is a sequence of integers >= 0; ValueError naming the input."""
    try:
        dims = tuple(shape)
    except TypeError:
        dims = None
    if dims is None or not all(_is_integer(size) and size >= 0 for size in dims):
        raise ValueError(f"input {in_!r} has shape {shape!r}: a shape is a sequence of "
                         "integers >= 0, e.g. net.blobs['data'].data.shape")


def check_order(order, indices, what, permutation=False):
    """``order`` has one integer from ``indices`` (a range) per index, each once when
    ``permutation``; ValueError starting with ``what`` otherwise."""
    if len(order) != len(indices):
        unit = "axes" if permutation else "channels"
        raise ValueError(f"{what} needs {len(indices)} {unit}, as the input has")
    if not all(_is_integer(index) and index in indices for index in order):
        raise ValueError(f"{what}: each entry must be an integer from {indices.start} to "
                         f"{indices.stop - 1}")
    if permutation and len(set(int(index) for index in order)) != len(order):
        raise ValueError(f"{what}: each axis must appear once")


def check_scale(scale, what):
    """``scale`` is one real, finite number (a 0-d array too); returns it.

    Raises:
        TypeError: not a number (a string, an array of several values, a bool).
        ValueError: NaN or infinite.
    """
    if isinstance(scale, (bool, np.bool_)) or not (
            isinstance(scale, numbers.Real)
            or (isinstance(scale, np.ndarray) and scale.ndim == 0 and scale.dtype.kind in "iuf")):
        raise TypeError(f"{what} must be a number, got {scale!r}")
    if not math.isfinite(float(scale)):
        raise ValueError(f"{what} must be a finite number, got {scale!r}")
    return scale
