"""Data: batches of Datums from an LMDB or LevelDB database (Caffe's DataLayer).

Each batch takes the next ``batch_size`` records in key order, turns them into pixels
(``data`` bytes, ``float_data``, or an encoded image), applies the ``transform_param``
preprocessing (pycaffe_cli/data/transformer.py) and copies the labels:

    top[0][i] = transform(record[pos + i]),   top[1][i] = record[pos + i].label

When the records run out the cursor goes back to the first one and Caffe's "Restarting data
prefetching from start." is logged. In data-parallel training (N ranks) a TRAIN-phase layer on
rank r takes the records r, r + N, r + 2N, ... of that endless sequence (Caffe's
DataLayer::Skip); a TEST-phase layer takes them all (only rank 0 tests). A background thread
prepares ``data_param.prefetch`` batches ahead. As in Caffe, a batch takes its shape from its
first record, so later records must match it (images of different sizes batch together only
with ``crop_size``).
"""
import os
import threading
import weakref

import numpy as np

from pycaffe_cli.backend import solver_setting
from pycaffe_cli.data.db import open_db
from pycaffe_cli.data.prefetch import Batch
from pycaffe_cli.data.transformer import DataTransformer, parse_datum, stage_images
from pycaffe_cli.errors import CaffeError, layer_error
from pycaffe_cli.layers.base import register
from pycaffe_cli.layers.base_data import (BasePrefetchingDataLayer, generator_state,
                                          restore_generator)
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.state_fields import state_generator, state_hex, state_int, state_object
from pycaffe_cli.threads import map_in_order

LMDB = caffe_pb2.DataParameter.LMDB

# One open database per folder and process: py-lmdb refuses to open an environment twice
# (and LevelDB locks its folder), yet a train and a test net may read the same source.
_OPEN_DBS = weakref.WeakValueDictionary()
_OPEN_DBS_LOCK = threading.Lock()


def shared_db(source, backend):
    """A read-only database for ``source``, shared with the layers already reading it."""
    key = (backend, os.path.realpath(source))
    with _OPEN_DBS_LOCK:
        db = _OPEN_DBS.get(key)
        if db is None:
            db = open_db(source, backend, mode="r")
            _OPEN_DBS[key] = db
        return db


@register("Data", v1="DATA")
class DataLayer(BasePrefetchingDataLayer):
    """data_param: source, backend, batch_size, rand_skip, prefetch; plus transform_param.

    ``backend`` left unset means Caffe's default, LEVELDB, unless the folder is an LMDB
    (it holds ``data.mdb``): then LMDB, where Caffe would fail to open it.
    """

    def data_layer_setup(self, top):
        param = self.param.data_param
        batch_size = self.positive_batch_size(param.batch_size, "data_param")
        self.warn_legacy_fields(param, "data_param")
        transformer = DataTransformer(self.param.transform_param, self.phase, self.name)
        db = self._open(param)
        rng = self.seeded_generator() if transformer.needs_rand else None
        reader = DatumReader(self.name, param.source, db, transformer, batch_size, rng,
                             self.output_labels)
        if self.phase == caffe_pb2.TRAIN:
            reader.shard(solver_setting("solver_count"), solver_setting("solver_rank"))
        skip = self.random_skip(param.rand_skip)
        if skip:
            LOG.info("Skipping first %d data points.", skip)
            reader.skip(skip)
        datum = reader.read_datum()
        shape = (batch_size,) + transformer.infer_shape(datum, "the first record")[1:]
        LOG.info("output data size: %s", ",".join(str(d) for d in shape))
        return reader, shape

    def _open(self, param):
        if not param.source:
            raise self.error("data_param source is not set")
        backend = param.backend
        if not param.HasField("backend") and os.path.isfile(os.path.join(param.source,
                                                                          "data.mdb")):
            backend = LMDB
        try:
            db = shared_db(param.source, backend)
        except CaffeError as error:
            raise self.error(str(error)) from None
        LOG.info("Opened %s %s", "lmdb" if backend == LMDB else "leveldb", param.source)
        return db


def _serially(function, items):
    return [function(item) for item in items]


class DatumReader:
    """Reads batches of Datums on the prefetch thread; its position is the next record's key
    and the state of the layer's random generator."""

    def __init__(self, layer_name, source, db, transformer, batch_size, rng, output_labels):
        self.layer_name = layer_name
        self.source = source
        self._db = db
        self._cursor = db.cursor()
        self._transformer = transformer
        self._batch_size = batch_size
        self._rng = rng
        self._output_labels = output_labels
        self._stage = None
        self._offset, self._count, self._rank = 0, 1, 0
        if not self._cursor.valid():
            raise layer_error(layer_name, f"database {source!r} is empty")

    def _record_error(self, error):
        key = self._cursor.key().decode(errors="replace")
        return layer_error(self.layer_name, f"record {key!r} of {self.source!r}: {error}")

    def read_datum(self):
        """The Datum at the cursor (the cursor stays there)."""
        try:
            return parse_datum(self._cursor.value())
        except CaffeError as error:
            raise self._record_error(error) from None

    def shard(self, count, rank):
        """Read only the records ``rank``, ``rank + count``, ... (``count`` ranks)."""
        self._count, self._rank = count, rank

    def advance(self):
        key = self._cursor.key()
        try:
            self._cursor.next()
            if not self._cursor.valid():
                LOG.info("Restarting data prefetching from start.")
                self._cursor.seek_to_first()
        except CaffeError as error:   # a damaged database: say where the reading stopped
            raise layer_error(self.layer_name, f"{error} (after record "
                                               f"{key.decode(errors='replace')!r})") from None
        self._offset += 1

    def _skip_other_ranks(self):
        """Caffe's ``while (Skip()) Next();``: pass the records of the other ranks."""
        while self._offset % self._count != self._rank:
            self.advance()

    def skip(self, count):
        for _ in range(count):
            self.advance()

    def load_batch(self, recycled):
        datums = []
        labels = np.empty(self._batch_size, np.float32)
        for index in range(self._batch_size):
            self._skip_other_ranks()
            datums.append((self.read_datum(), self._cursor.key()))
            labels[index] = datums[-1][0].label
            self.advance()
        # Encoded records are decoded on the side threads; raw ones are only a view of bytes.
        convert = map_in_order if any(datum.encoded for datum, _ in datums) else _serially
        images = convert(self._to_array, datums)
        try:
            self._stage, sizes = stage_images(images, self._stage)
        except CaffeError as error:
            raise layer_error(self.layer_name, str(error)) from None
        shape = (self._batch_size,) + self._transformer.output_shape(images[0].shape)
        if recycled is not None and recycled.data.shape == shape:
            data = recycled.data
        else:
            data = np.empty(shape, np.float32)
        self._transformer.transform_batch(self._stage, data, sizes, self._rng)
        return Batch(data, labels if self._output_labels else None, self.position())

    def _to_array(self, datum_and_key):
        datum, key = datum_and_key
        try:
            return self._transformer.datum_to_array(datum)
        except CaffeError as error:
            raise layer_error(self.layer_name, f"record {key.decode(errors='replace')!r} of "
                                               f"{self.source!r}: {error}") from None

    def position(self):
        position = {"key": self._cursor.key().hex(), "rng": generator_state(self._rng)}
        if self._count > 1:
            position["offset"] = self._offset % self._count
        return position

    def restore(self, position):
        """Continue from a ``position()`` dict, every field checked first (state_fields.py)."""
        state_object(position, ("key", "rng") + (("offset",) if self._count > 1 else ()))
        key = state_hex(position, "key")
        rng_state = state_generator(position, "rng", self._rng)
        offset = 0
        if self._count > 1:
            offset = state_int(position, "offset", 0, self._count, f" ({self._count} ranks)")
        if not self._cursor.seek(key):
            raise layer_error(self.layer_name, f"saved data position: database "
                                               f"{self.source!r} has no record {key!r}")
        restore_generator(self._rng, rng_state)
        self._offset = offset
