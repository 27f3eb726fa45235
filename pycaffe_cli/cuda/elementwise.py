"""What the neuron layers' GPU paths share (numba.cuda).

* ``DeviceCopy``: a device buffer a layer keeps a copy of its input or output in, between
  forward and backward. Layers whose backward reads data that running in place destroys (the
  input, overwritten by the output) or that a following in-place layer destroys (the output)
  keep a copy then, on the device as their CPU paths keep a numpy copy.
* ``sigmoid``: 1 / (1 + e^-z) in float32 for Sigmoid and Swish, as a device function.

The kernels themselves live beside their layers (``layers/relu.py``, ...); each is a
grid-stride loop over the flat blob launched through ``launch.launch``.
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda import memory


class DeviceCopy:
    """A device copy of a flat array, in a Blob that only grows (so after the first forward
    pass keeping a copy allocates nothing)."""

    def __init__(self):
        self._blob = Blob()

    def store(self, source):
        """Copy the flat device array ``source`` (device to device); return the copy."""
        self._blob.reshape((source.size,))
        copy = self._blob.mutable_gpu_data
        memory.copy(source, copy)
        return copy

    def view(self):
        """The copy ``store`` made last (flat, for reading)."""
        return self._blob.gpu_data

    def keep_if(self, array, in_place):
        """Forward: ``array``, copied first when the layer runs in place (and so is about to
        overwrite it); returns what the kernel should read."""
        return self.store(array) if in_place else array

    def kept_or(self, blob, in_place):
        """Backward: the copy ``keep_if`` kept when in place, else ``blob``'s device data."""
        return self.view() if in_place else blob.gpu_data


@cuda.jit(device=True)
def sigmoid(z):
    """1 / (1 + e^-z) for a float32 ``z``, as e^z / (1 + e^z) for negative z: the exponential
    never exceeds 1, so nothing overflows (the CUDA simulator's math.exp would raise) and
    both tails keep full relative precision."""
    one = np.float32(1)
    if z >= 0:
        return one / (one + math.exp(-z))
    e = math.exp(z)
    return e / (one + e)
