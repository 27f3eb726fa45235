"""MemoryData: serve batches from numpy arrays handed in from Python (Caffe's MemoryDataLayer).

    top[0] = data[pos : pos + batch_size]     shape (batch_size, channels, height, width)
    top[1] = labels[pos : pos + batch_size]   shape (batch_size,)
    pos    = (pos + batch_size) mod n

``reset(data, labels)`` hands the layer ``n`` examples (``n`` a multiple of batch_size, as Caffe
checks); each forward serves the next batch and wraps around at the end.
"""
import numpy as np

from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.state_fields import StateFieldError, state_int, state_object


@register("MemoryData", v1="MEMORY_DATA")
class MemoryDataLayer(Layer):
    """memory_data_param: batch_size, channels, height, width (all must be positive).

    Only numpy feeding (Caffe's ``Reset``, pycaffe's ``set_input_arrays``) is supported: the
    arrays are served exactly as given. Caffe's Datum / cv::Mat feeding, the only path where it
    applies a ``transform_param``, does not exist here, so a layer with any ``transform_param``
    setting is refused rather than silently left untransformed.
    """

    exact_num_bottom = 0
    exact_num_top = 2

    def layer_setup(self, bottom, top):
        if self.param.HasField("transform_param") and self.param.transform_param.ListFields():
            raise self.error("MemoryData does not transform data: pycaffe feeds it numpy "
                             "arrays only (reset(data, labels)), so remove transform_param "
                             "and transform the arrays before handing them in")
        param = self.param.memory_data_param
        self._batch_size = param.batch_size
        self._item_shape = (param.channels, param.height, param.width)
        if self._batch_size <= 0 or min(self._item_shape) <= 0:
            raise self.error(f"batch_size, channels, height, and width must be specified and "
                             f"positive in memory_data_param (got batch_size "
                             f"{self._batch_size}, channels/height/width {self._item_shape})")
        self._data = None
        self._labels = None
        self._pos = 0

    @property
    def batch_size(self):
        return self._batch_size

    def reset(self, data, labels):
        """Hand the layer ``n`` examples: data (n, channels, height, width), labels (n,).

        The arrays are copied as float32. ``n`` must be a positive multiple of batch_size.
        Serving starts again from the first example.
        """
        data = np.asarray(data)
        labels = np.asarray(labels)
        if data.ndim != 4 or data.shape[1:] != self._item_shape:
            c, h, w = self._item_shape
            raise self.error(f"data array must have shape (n, {c}, {h}, {w}) to match "
                             f"memory_data_param, got {data.shape}")
        n = data.shape[0]
        if labels.size != n or (labels.ndim > 1 and labels.shape[0] != n):
            raise self.error(f"labels must hold one value per example ({n}), got shape "
                             f"{labels.shape}")
        self._check_multiple(n, self._batch_size)
        self._data = np.ascontiguousarray(data, dtype=np.float32).copy()
        self._labels = labels.reshape(n).astype(np.float32)
        self._pos = 0

    def set_batch_size(self, batch_size):
        """Serve batches of ``batch_size`` from now on (the tops reshape on the next forward)."""
        batch_size = int(batch_size)
        if batch_size <= 0:
            raise self.error(f"batch_size must be positive, got {batch_size}")
        if self._data is not None:
            self._check_multiple(self._data.shape[0], batch_size)
        self._batch_size = batch_size

    def _check_multiple(self, n, batch_size):
        if n == 0 or n % batch_size:
            raise self.error(f"the number of examples ({n}) must be a positive multiple of "
                             f"the batch size ({batch_size})")

    def reshape(self, bottom, top):
        top[0].reshape((self._batch_size,) + self._item_shape)
        top[1].reshape((self._batch_size,))

    def forward_cpu(self, bottom, top):
        if self._data is None:
            raise self.error("MemoryData needs its data before forward: call "
                             "layer.reset(data, labels) from Python (it cannot be fed from a "
                             "prototxt alone)")
        stop = self._pos + self._batch_size
        top[0].data[...] = self._data[self._pos:stop]
        top[1].data[...] = self._labels[self._pos:stop]
        self._pos = stop % self._data.shape[0]

    def get_state(self):
        return {"pos": self._pos}

    def set_state(self, state):
        """Continue at example ``pos``: a multiple of batch_size within the data (any
        multiple while no data has been handed in: ``reset`` starts again at 0)."""
        state_object(state, ("pos",))
        n = self._data.shape[0] if self._data is not None else 2 ** 31
        pos = state_int(state, "pos", 0, n, " (the examples handed in)")
        if pos % self._batch_size:
            raise StateFieldError("pos", f"must be a multiple of the batch size "
                                         f"({self._batch_size}), found {pos}")
        self._pos = pos
