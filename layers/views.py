"""Axis helpers shared by layers that work along one axis (softmax, losses, accuracy, ...)."""
import numpy as np

from pycaffe_cli.errors import CaffeError


def layer_axis(layer, blob, axis):
    """``blob.canonical_axis_index(axis)``, with a range error that names ``layer``."""
    try:
        return blob.canonical_axis_index(axis)
    except CaffeError as error:
        raise layer.error(str(error)) from None


def three_axis_view(array, axis):
    """``array`` reshaped to (count before axis, shape[axis], count after axis)."""
    shape = array.shape
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    return array.reshape(outer, shape[axis], inner)
