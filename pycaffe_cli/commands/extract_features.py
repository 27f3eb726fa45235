"""``pycaffe extract_features``: Caffe's tools/extract_features.cpp.

Runs a TEST-phase net for NUM_MINI_BATCHES forward passes and stores, for every item of every
batch, the named blobs' values as Datums (``float_data``, with the blob's legacy channels /
height / width) in one new database per blob, keyed ``"%010d"`` by the item's running index.
Log lines are Caffe's, "Extacting Features" spelling included, so log parsers keep working.

Where pycaffe differs: a MODE other than CPU or GPU, a DEVICE_ID or NUM_MINI_BATCHES that is
not a non-negative integer, and a blob with more than 4 axes are one-line errors (Caffe reads
an unknown mode as CPU and bad numbers as 0, and aborts on a 5-d blob). The databases are
written under temporary names beside their targets and renamed only once every batch has been
written, so a failed or interrupted run leaves no partial database. DB_TYPE leveldb needs the
optional ``plyvel`` package (without it: a one-line error before anything is written).
"""
import numpy as np

from pycaffe_cli import backend
from pycaffe_cli.commands import subcommand
from pycaffe_cli.data.db import NewDatabase, backend_from_name, check_new_database
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2

COMMIT_EVERY = 1000
_LEGACY_AXES = 4


@subcommand("extract_features", flags=(),
            summary="extract features of the input data produced by a net",
            arguments=("PRETRAINED_NET_PARAM", "FEATURE_EXTRACTION_PROTO_FILE",
                       "EXTRACT_FEATURE_BLOB_NAMES", "SAVE_FEATURE_DATASET_NAMES",
                       "NUM_MINI_BATCHES", "DB_TYPE", "[MODE]", "[DEVICE_ID]"))
def extract_features(pretrained_net_param, feature_extraction_proto_file,
                     extract_feature_blob_names, save_feature_dataset_names, num_mini_batches,
                     db_type, mode, device_id):
    """Extract features of the input data produced by a trained net.

    Runs FEATURE_EXTRACTION_PROTO_FILE (TEST phase, weights from PRETRAINED_NET_PARAM)
    NUM_MINI_BATCHES times and saves each blob of EXTRACT_FEATURE_BLOB_NAMES (name1,name2,...)
    to the matching new database of SAVE_FEATURE_DATASET_NAMES (db1,db2,...; DB_TYPE lmdb or
    leveldb). MODE is CPU (default) or GPU, on DEVICE_ID (default 0).
    """
    _set_mode(mode, device_id)
    batches = _non_negative_int(num_mini_batches, "NUM_MINI_BATCHES")
    db_backend = backend_from_name(db_type)
    blob_names = extract_feature_blob_names.split(",")
    dataset_names = save_feature_dataset_names.split(",")
    _check_datasets(blob_names, dataset_names)  # before the (maybe slow) net loading
    net = _load_net(feature_extraction_proto_file, pretrained_net_param)
    _check_blobs(net, blob_names, feature_extraction_proto_file)
    blobs = [net.blob_by_name(name) for name in blob_names]
    write_features(net, blobs, blob_names, dataset_names, db_backend, batches)
    LOG.error("Successfully extracted the features!")
    return 0


def _set_mode(mode, device_id):
    """Caffe's mode arguments: "GPU" [DEVICE_ID=0], or CPU (the default; DEVICE_ID ignored)."""
    if mode not in (None, "CPU", "GPU"):
        raise CaffeError(f'extract_features: MODE must be CPU or GPU, not "{mode}"')
    if mode == "GPU":
        LOG.error("Using GPU")
        device = 0 if device_id is None else _non_negative_int(device_id, "DEVICE_ID")
        LOG.error(f"Using Device_id={device}")
        backend.set_mode_gpu(device)
    else:
        LOG.error("Using CPU")
        backend.set_mode_cpu()


def _non_negative_int(text, what):
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise CaffeError(f'extract_features: {what} must be a non-negative integer, '
                         f'not "{text}"')
    return value


def _load_net(proto_file, weights_file):
    from pycaffe_cli.net.net import Net
    from pycaffe_cli.net.weights import copy_trained_layers_from
    net = Net.from_file(proto_file, caffe_pb2.TEST)
    copy_trained_layers_from(net, weights_file)
    return net


def _check_datasets(blob_names, dataset_names):
    if len(blob_names) != len(dataset_names):
        raise CaffeError(f"extract_features: the number of blob names ({len(blob_names)}) "
                         f"and dataset names ({len(dataset_names)}) must be equal")
    for i, path in enumerate(dataset_names):
        if not path:
            raise CaffeError("extract_features: empty dataset name in "
                             f'"{",".join(dataset_names)}"')
        if path in dataset_names[:i]:
            raise CaffeError(f"extract_features: dataset '{path}' is named twice")
        check_new_database(path, "extract_features: ")


def _check_blobs(net, blob_names, proto_file):
    for name in blob_names:
        if not net.has_blob(name):
            raise CaffeError(f'extract_features: Unknown feature blob name "{name}" in the '
                             f"network {proto_file}")
        axes = net.blob_by_name(name).num_axes
        if axes > _LEGACY_AXES:
            raise CaffeError(f'extract_features: blob "{name}" has {axes} axes; a Datum '
                             "holds at most 4 (num, channels, height, width)")


def write_features(net, blobs, blob_names, paths, db_backend, batches):
    """Run ``batches`` forward passes; store each blob's items in a new database per path.

    Every database is written under a temporary name and renamed to its path at the end;
    on any error (or interruption) the temporary databases are removed (db.NewDatabase).
    """
    writers = []
    try:
        for path in paths:
            LOG.info(f"Opening dataset {path}")
            writers.append(_FeatureDB(path, db_backend))
        LOG.error("Extacting Features")  # sic: Caffe's spelling, which log parsers match
        for _ in range(batches):
            net.forward()
            for writer, blob, name in zip(writers, blobs, blob_names):
                _put_items(writer, blob, name)
        for writer, name in zip(writers, blob_names):
            writer.db.close()
            _log_count(writer.count, name)
        for writer in writers:
            writer.db.check_new()  # something may have appeared there while we ran
        for writer in writers:
            writer.db.move_into_place()
    except BaseException:
        for writer in writers:
            writer.db.discard()
        raise


class _FeatureDB:
    """A new database filled in transactions of COMMIT_EVERY puts, as Caffe's tool commits."""

    def __init__(self, path, db_backend):
        self.db = NewDatabase(path, db_backend, tool="extract_features")
        self.count = 0

    def put(self, datum):
        """Store ``datum`` under the next running index; True when that ended a commit."""
        self.db.put(f"{self.count:010d}", datum.SerializeToString())
        self.count += 1
        if self.count % COMMIT_EVERY:
            return False
        self.db.commit()
        return True


def _put_items(writer, blob, name):
    """One Datum per item (along the first axis) of ``blob``, keyed by its running index."""
    num = blob.num
    if num == 0:
        return
    rows = np.asarray(blob.cpu_data, dtype=np.float32).reshape(num, -1)
    for row in rows:
        datum = caffe_pb2.Datum(channels=blob.channels, height=blob.height, width=blob.width)
        datum.float_data.extend(row.tolist())
        if writer.put(datum):
            _log_count(writer.count, name)


def _log_count(count, name):
    LOG.error(f"Extracted features of {count} query images for feature blob {name}")
