"""``pycaffe compute_image_mean``: Caffe's tools/compute_image_mean.cpp.

The mean of every Datum in a database (raw bytes, float_data, or encoded images decoded in
their own channels), written as a (1, C, H, W) BlobProto in the legacy num/channels/height/
width fields, as Caffe writes it. Sums are kept in float64 (Caffe sums in float32, which
stops being exact past 65,793 images of 255s); the mean itself is float32.
"""
import numpy as np

from pycaffe_cli.commands import subcommand
from pycaffe_cli.data.db import backend_from_name, open_db
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.blob_proto import fill_blob_proto
from pycaffe_cli.io.prototxt import write_blob_proto
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2

_LOG_EVERY = 10000
_BATCH = 1024  # datums summed together in one numpy call

TOOL_FLAGS = {
    "backend": dict(default="lmdb", show_default=True, metavar="lmdb|leveldb",
                    help="The backend {leveldb, lmdb} containing the images."),
}


@subcommand("compute_image_mean", flags=(), summary="compute the mean image of a leveldb/lmdb",
            arguments=("INPUT_DB", "[OUTPUT_FILE]"), own_flags=TOOL_FLAGS)
def compute_image_mean(input_db, output_file, backend):
    """Compute the mean_image of a set of images given by a leveldb/lmdb.

    Writes it to OUTPUT_FILE (a .binaryproto) when given, and logs each channel's mean.
    """
    mean, _ = compute_mean(input_db, backend_from_name(backend))
    if output_file is not None:
        LOG.info(f"Write to {output_file}")
        write_blob_proto(output_file, mean_blob_proto(mean))
    channels = mean.shape[1]
    LOG.info(f"Number of channels: {channels}")
    per_channel = mean.reshape(channels, -1).astype(np.float64).mean(axis=1)
    for c, value in enumerate(per_channel):
        LOG.info(f"mean_value channel [{c}]:{float(np.float32(value)):g}")
    return 0


def compute_mean(path, backend=caffe_pb2.DataParameter.LMDB):
    """The (1, C, H, W) float32 mean of the database's Datums, and how many there were.

    Raises:
        CaffeError: an empty or unreadable database, or a Datum whose size differs from the
            first one's channels x height x width.
    """
    from pycaffe_cli.data.image_datum import datum_values
    database = open_db(path, backend, "r")
    try:
        cursor = database.cursor()
        if not cursor.valid():
            raise CaffeError(f"compute_image_mean: database '{path}' holds no Datums")
        first, encoded = _read_datum(cursor, path)
        if encoded:
            LOG.info("Decoding Datum")
        shape = (1, first.channels, first.height, first.width)
        data_size = first.channels * first.height * first.width
        total = np.zeros(max(len(first.data), len(first.float_data)), np.float64)
        LOG.info("Starting Iteration")
        count, batch = 0, []
        while cursor.valid():
            datum = _read_datum(cursor, path)[0]
            values = datum_values(datum)
            if values.size != data_size:
                raise CaffeError(f"compute_image_mean: {path}: Datum "
                                 f"'{cursor.key().decode(errors='replace')}' has "
                                 f"{values.size} values; the first has {data_size} "
                                 f"({first.channels}x{first.height}x{first.width})")
            batch.append(values)
            count += 1
            if len(batch) == _BATCH:
                total += _sum(batch)
                batch = []
            if count % _LOG_EVERY == 0:
                LOG.info(f"Processed {count} files.")
            _next(cursor)
    finally:
        database.close()
    if batch:
        total += _sum(batch)
    if count % _LOG_EVERY:
        LOG.info(f"Processed {count} files.")
    return (total / count).astype(np.float32).reshape(shape), count


def _sum(batch):
    return np.stack(batch).sum(axis=0, dtype=np.float64)


def _next(cursor):
    """Move on; a damaged database's error says after which record it stopped."""
    key = cursor.key()
    try:
        cursor.next()
    except CaffeError as error:
        raise CaffeError(f"compute_image_mean: {error} (after record "
                         f"'{key.decode(errors='replace')}')") from None


def _read_datum(cursor, path):
    """The raw Datum at the cursor (decoded if it was encoded) and whether it was encoded;
    a damaged record is an error naming the database and the key."""
    from pycaffe_cli.data.image_datum import decode_datum_native
    key = cursor.key().decode(errors="replace")
    datum = caffe_pb2.Datum()
    try:
        value = cursor.value()
        try:
            datum.ParseFromString(value)
        except Exception:  # protobuf's DecodeError; other parse failures are the same mistake
            raise CaffeError("the value is not a Datum") from None
        return datum, decode_datum_native(datum)
    except CaffeError as error:
        message = str(error)
        where = "" if path in message else f"{path}: "
        raise CaffeError(f"compute_image_mean: {where}record '{key}': {message}") from None


def mean_blob_proto(mean):
    """A BlobProto of a (1, C, H, W) mean in the legacy fields Caffe's mean files use."""
    proto = fill_blob_proto(caffe_pb2.BlobProto(), mean.reshape(-1))
    proto.ClearField("shape")
    proto.num, proto.channels, proto.height, proto.width = (int(d) for d in mean.shape)
    return proto
