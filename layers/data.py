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

from pycaffe_cli.backend import solver_setting
from pycaffe_cli.data.db import open_db
from pycaffe_cli.data.transformer import DataTransformer
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.annotated_reader import AnnotatedDatumReader, Augmenter
from pycaffe_cli.layers.base import register
from pycaffe_cli.layers.base_data import BasePrefetchingDataLayer
from pycaffe_cli.layers.datum_reader import DatumReader
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2

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
        # the transform's files (mean_file) are checked before the database is opened
        if _ssd_geometry(self.param.transform_param):
            # SSD's resize_param, noise_param, crop_h, crop_w: per image, as AnnotatedData
            augmenter = Augmenter(self.param.transform_param, self.phase, self.name)
            reader = AnnotatedDatumReader(self.name, param.source, self._open(param), augmenter,
                                          batch_size, self.seeded_generator(),
                                          self.output_labels, plain=True)
            datum = self.start_reader(reader, param)
            shape = (batch_size,) + reader.item_shape(datum, "the first record")
        else:
            transformer = DataTransformer(self.param.transform_param, self.phase, self.name)
            rng = self.seeded_generator() if transformer.needs_rand else None
            reader = DatumReader(self.name, param.source, self._open(param), transformer,
                                 batch_size, rng, self.output_labels)
            datum = self.start_reader(reader, param)
            shape = (batch_size,) + transformer.infer_shape(datum, "the first record")[1:]
        LOG.info("output data size: %s", ",".join(str(d) for d in shape))
        return reader, shape

    def start_reader(self, reader, param):
        """Put a new reader where this layer starts: its rank's share of the records in
        TRAIN, past ``rand_skip``; return the first record it will read."""
        if self.phase == caffe_pb2.TRAIN:
            reader.shard(solver_setting("solver_count"), solver_setting("solver_rank"))
        skip = self.random_skip(param.rand_skip)
        if skip:
            LOG.info("Skipping first %d data points.", skip)
            reader.skip(skip)
        return reader.read_datum()

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


def _ssd_geometry(param):
    """Whether a transform_param sets SSD's resize_param, noise_param, crop_h or crop_w, which
    SSD's Data layer applies to each (encoded) image before cropping (pycaffe does to raw ones
    too)."""
    return (param.HasField("resize_param") or param.HasField("noise_param")
            or param.crop_h > 0 or param.crop_w > 0)
