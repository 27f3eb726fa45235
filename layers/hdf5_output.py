"""HDF5Output: write the ``data`` and ``label`` bottoms to an HDF5 file (Caffe's
HDF5OutputLayer).

The file ``hdf5_output_param.file_name`` is created anew at set-up (made beside its name and
renamed onto it: an earlier file is replaced, a link by a file and never its target; a folder,
pipe or device there is refused). Each forward appends the batch to the datasets ``data`` and
``label``, stored as float32 in Caffe's 4-D legacy shape (num, channels, height, width),
missing axes counting as 1. Caffe rewrites the same datasets on every forward (so only one
batch ever fits); here they grow, and the file is flushed after every batch so that a killed
run still leaves a readable file. ``close()`` closes it.
"""
import os

import h5py
import numpy as np

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.files import open_new_in_place
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.log import LOG

DATASET_NAMES = ("data", "label")


@register("HDF5Output", v1="HDF5_OUTPUT")
class HDF5OutputLayer(Layer):
    """hdf5_output_param: file_name. Bottoms: data, label. No tops, no gradients."""

    exact_num_bottom = 2
    exact_num_top = 0

    def layer_setup(self, bottom, top):
        self._file = None
        self.file_name = self.param.hdf5_output_param.file_name
        if not self.file_name:
            raise self.error("hdf5_output_param file_name is required")
        folder = os.path.dirname(self.file_name) or "."
        if not os.path.isdir(folder):
            raise self.error(f"cannot create HDF5 file {self.file_name!r}: folder {folder!r} "
                             f"does not exist")
        try:
            self._file = open_new_in_place(self.file_name, lambda temp: h5py.File(temp, "w"))
        except CaffeError as error:
            raise self.error(str(error)) from None

    def reshape(self, bottom, top):
        """No tops; the bottoms are checked on forward."""

    def forward_cpu(self, bottom, top):
        if self._file is None:
            raise self.error(f"HDF5 file {self.file_name!r} is already closed")
        if bottom[0].num != bottom[1].num:
            raise self.error(f"data and label blobs must have the same batch size: "
                             f"{bottom[0].shape_string()} vs {bottom[1].shape_string()}")
        for name, blob in zip(DATASET_NAMES, bottom):
            self._append(name, blob)
        self._file.flush()
        LOG.info("Saved %d rows to HDF5 file %s", bottom[0].num, self.file_name)

    def _append(self, name, blob):
        if blob.num_axes > 4:
            raise self.error(f"HDF5Output writes 4-D (num, channels, height, width) "
                             f"datasets; bottom {name!r} has shape {blob.shape_string()}")
        shape = (blob.num, blob.channels, blob.height, blob.width)
        rows = blob.data.reshape(shape)
        dataset = self._file.get(name)
        if dataset is None:
            self._file.create_dataset(name, data=rows, dtype=np.float32,
                                      maxshape=(None,) + shape[1:], chunks=True)
            return
        if dataset.shape[1:] != shape[1:]:
            raise self.error(f"bottom {name!r} changed shape: {blob.shape_string()}, but "
                             f"earlier batches had rows of shape {dataset.shape[1:]}")
        start = dataset.shape[0]
        dataset.resize(start + shape[0], axis=0)
        dataset[start:] = rows

    def close(self):
        """Close the file (later forwards raise). Safe to call more than once."""
        if self._file is not None:
            self._file.close()
            self._file = None
