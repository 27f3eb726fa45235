"""Axis helpers shared by layers that work along one axis (softmax, losses, accuracy, ...)."""
import math

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
    # math.prod, not np.prod: at batch 1 after a forward pass the caches are cold, and
    # np.prod on a tuple cost a good part of a small layer's step (docs/kernel-choices.md,
    # "Softmax rows").
    return array.reshape(math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:]))
