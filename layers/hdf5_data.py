"""HDF5Data: serve rows of the datasets in a list of HDF5 files (Caffe's HDF5DataLayer).

``hdf5_data_param.source`` is a text file of .h5 paths (whitespace-separated, as Caffe reads
it; relative paths resolve against the working directory). Each top is filled from the dataset
of the same name; row ``r`` of every dataset belongs together. One file is held in memory at a
time. A batch is taken row by row in permutation order and continues into the next file when
the current one runs out; after the last file the list starts again.

With ``shuffle``, Caffe's order of draws is kept: the file order is shuffled at set-up and each
time the list wraps around; the row order is shuffled when a file is loaded and again each
time its last row has been served (so a single file is re-shuffled every pass).

In data-parallel training (N ranks) a TRAIN-phase layer on rank r serves the rows r, r + N,
r + 2N, ... of that endless sequence (Caffe's HDF5DataLayer::Skip); each rank shuffles with its
own random stream, as in Caffe, so with ``shuffle`` the ranks' rows are not a partition.
"""
import errno
import os

import h5py
import numpy as np

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.hdf5_read import H5PY_ERRORS, h5py_detail, read_float32
from pycaffe_cli.io.input_files import file_problem, read_input_text, shown
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.state_fields import state_int, state_object, state_permutation
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2


@register("HDF5Data", v1="HDF5_DATA")
class HDF5DataLayer(Layer):
    """hdf5_data_param: source, batch_size, shuffle (default false). Tops named by dataset."""

    exact_num_bottom = 0
    min_num_top = 1

    def layer_setup(self, bottom, top):
        if self.param.HasField("transform_param"):
            raise self.error("HDF5Data does not transform data; remove transform_param")
        param = self.param.hdf5_data_param
        self._names = list(self.param.top)
        if len(self._names) != len(top):
            raise self.error(f"HDF5Data names its datasets by its tops: the layer lists "
                             f"{len(self._names)} top name(s) for {len(top)} top blob(s)")
        if param.batch_size <= 0:
            raise self.error(f"hdf5_data_param batch_size must be positive "
                             f"(got {param.batch_size})")
        self._batch_size = param.batch_size
        self._shuffle = param.shuffle
        self._offset, self._ranks, self._rank = 0, 1, 0   # Caffe's offset_, solver count/rank
        if self.phase == caffe_pb2.TRAIN:
            self._ranks = backend.solver_setting("solver_count")
            self._rank = backend.solver_setting("solver_rank")
        self._files = self._read_source(param.source)
        self._file_permutation = np.arange(len(self._files))
        if self._shuffle:
            backend.rng().shuffle(self._file_permutation)
        self._current_file = 0
        self._top_shapes = None
        self._load(self._file_permutation[0])
        self._current_row = 0
        self._top_shapes = [(self._batch_size,) + a.shape[1:] for a in self._arrays]

    def _read_source(self, source):
        LOG.info("Loading list of HDF5 filenames from: %s", source)
        try:
            files = read_input_text(source, "HDF5 source list").split()
        except CaffeError as error:
            raise self.error(str(error)) from None
        LOG.info("Number of HDF5 files: %d", len(files))
        if not files:
            raise self.error(f"must have at least 1 HDF5 filename listed in {source!r}")
        return files

    # --- file loading ----------------------------------------------------------------
    def _load(self, file_index, reset_order=True):
        """Read every top's dataset of one file into memory and (re)draw the row order."""
        self._arrays = self._read_file(file_index)
        if not reset_order:
            return
        self._data_permutation = np.arange(self._arrays[0].shape[0])
        if self._shuffle:
            backend.rng().shuffle(self._data_permutation)

    def _read_file(self, file_index):
        """Every top's dataset of one file, checked to have the same rows."""
        path = self._files[file_index]
        with self._open(path) as handle:
            arrays = [self._read_dataset(handle, path, name) for name in self._names]
        rows = arrays[0].shape[0]
        for name, array in zip(self._names, arrays):
            if array.shape[0] != rows:
                raise self.error(f"HDF5 file {path!r}: datasets must have the same number of "
                                 f"rows, but {self._names[0]!r} has {rows} and {name!r} has "
                                 f"{array.shape[0]}")
        if rows == 0:
            raise self.error(f"HDF5 file {path!r}: the datasets have no rows")
        if self._top_shapes is not None:
            self._check_row_shapes(path, arrays)
        return arrays

    def _open(self, path):
        """h5py's handle on a listed file, checked first (h5py would block on a pipe)."""
        source = self.param.hdf5_data_param.source
        problem = file_problem(path)
        if problem == os.strerror(errno.ENOENT):
            problem = "it does not exist"
        if problem:
            raise self.error(f"HDF5 file '{shown(path)}' (listed in {source!r}): {problem}")
        try:
            return h5py.File(path, "r")
        except H5PY_ERRORS as exc:
            raise self.error(f"failed opening HDF5 file {path!r}: {h5py_detail(exc)}") from None

    def _read_dataset(self, handle, path, name):
        try:
            return self._checked_dataset(handle, path, name)
        except H5PY_ERRORS as exc:   # a damaged file (hdf5_read.py)
            raise self.error(f"HDF5 file {path!r} is damaged: cannot read dataset {name!r} "
                             f"({h5py_detail(exc)})") from None

    def _checked_dataset(self, handle, path, name):
        # not get(): that hides a damaged object as a missing one
        dataset = handle[name] if name in handle else None
        if not isinstance(dataset, h5py.Dataset):
            names = sorted(handle.keys())
            if dataset is None and name in names:   # listed, yet not found by name
                raise self.error(f"HDF5 file {path!r} is damaged: dataset {name!r} is listed "
                                 "but cannot be looked up")
            raise self.error(f"HDF5 file {path!r} has no dataset {name!r} (the top names "
                             f"select the datasets; it has {names})")
        if dataset.ndim < 1:
            raise self.error(f"HDF5 file {path!r}: dataset {name!r} must have at least 1 axis")
        if dataset.dtype.kind not in "fiu":
            raise self.error(f"HDF5 file {path!r}: dataset {name!r} has type {dataset.dtype}; "
                             f"only float and integer datasets can be read")
        return read_float32(dataset, f"HDF5 file {path!r}: dataset {name!r}")

    def _check_row_shapes(self, path, arrays):
        """Later files must have the rows the tops were shaped for by the first file."""
        for name, array, shape in zip(self._names, arrays, self._top_shapes):
            if array.shape[1:] != shape[1:]:
                raise self.error(f"HDF5 file {path!r}: dataset {name!r} has rows of shape "
                                 f"{array.shape[1:]}, but the first file's rows are "
                                 f"{shape[1:]}")

    # --- serving ---------------------------------------------------------------------
    def reshape(self, bottom, top):
        for blob, shape in zip(top, self._top_shapes):
            blob.reshape(shape)

    def forward_cpu(self, bottom, top):
        if self._ranks > 1:
            self._forward_rows_of_this_rank(top)
            return
        filled = 0
        while filled < self._batch_size:
            rows = self._arrays[0].shape[0]
            take = min(self._batch_size - filled, rows - self._current_row)
            chosen = self._data_permutation[self._current_row:self._current_row + take]
            for blob, array in zip(top, self._arrays):
                blob.data[filled:filled + take] = array[chosen]
            filled += take
            self._current_row += take
            if self._current_row == rows:
                self._next_file()

    def _forward_rows_of_this_rank(self, top):
        """Caffe's row loop: ``while (Skip()) Next();`` copy the row; ``Next()``."""
        for i in range(self._batch_size):
            while self._offset % self._ranks != self._rank:
                self._next_row()
            row = self._data_permutation[self._current_row]
            for blob, array in zip(top, self._arrays):
                blob.data[i] = array[row]
            self._next_row()

    def _next_row(self):
        self._current_row += 1
        if self._current_row == self._arrays[0].shape[0]:
            self._next_file()
        self._offset += 1

    def _next_file(self):
        """The current file is used up: move on (Caffe's Next at the last row)."""
        if len(self._files) > 1:
            self._current_file += 1
            if self._current_file == len(self._files):
                self._current_file = 0
                if self._shuffle:
                    backend.rng().shuffle(self._file_permutation)
            self._load(self._file_permutation[self._current_file])
        self._current_row = 0
        if self._shuffle:
            backend.rng().shuffle(self._data_permutation)

    # --- resumable state -------------------------------------------------------------
    def get_state(self):
        state = {"file": self._current_file, "row": self._current_row,
                 "file_permutation": self._file_permutation.tolist(),
                 "data_permutation": self._data_permutation.tolist()}
        if self._ranks > 1:
            state["offset"] = self._offset % self._ranks
        return state

    def set_state(self, state):
        """Continue from a ``get_state`` dict, every field checked before anything changes."""
        keys = ("file", "row", "file_permutation", "data_permutation")
        state_object(state, keys + (("offset",) if self._ranks > 1 else ()))
        listed = f" (the files listed in {self.param.hdf5_data_param.source!r})"
        file_permutation = state_permutation(state, "file_permutation", len(self._files), listed)
        current_file = state_int(state, "file", 0, len(self._files), listed)
        offset = 0
        if self._ranks > 1:
            offset = state_int(state, "offset", 0, self._ranks, f" ({self._ranks} ranks)")
        index = file_permutation[current_file]
        arrays = self._read_file(index)
        rows = arrays[0].shape[0]
        in_file = f" (the rows of {self._files[index]!r})"
        data_permutation = state_permutation(state, "data_permutation", rows, in_file)
        row = state_int(state, "row", 0, rows, in_file)
        self._file_permutation = np.asarray(file_permutation, dtype=np.int64)
        self._current_file = current_file
        self._arrays = arrays
        self._data_permutation = np.asarray(data_permutation, dtype=np.int64)
        self._current_row = row
        self._offset = offset
