#!/usr/bin/env python3
"""Convert the CIFAR-10 binary batches to LMDB/LevelDB (Caffe's convert_cifar_data).

    python scripts/convert_cifar10.py [--mean] INPUT_FOLDER OUTPUT_FOLDER [lmdb|leveldb]

INPUT_FOLDER holds ``data_batch_1.bin`` ... ``data_batch_5.bin`` and ``test_batch.bin``; each
record is one label byte and 3072 pixel bytes (32x32 red plane, green plane, blue plane).
Writes ``OUTPUT_FOLDER/cifar10_train_<db>`` and ``cifar10_test_<db>``: raw 3x32x32 Datums
keyed "%05d" by their index, the bytes copied as they are (so in the file's RGB plane order,
as Caffe's converter leaves them). With ``--mean`` also ``OUTPUT_FOLDER/mean.binaryproto``,
the training set's mean as compute_image_mean writes it. Nothing is downloaded.

Caffe reads exactly 10000 records per batch; here every whole record in each file is read,
so smaller batches (test subsets) convert too. Keys count on across the training batches.
"""
import argparse
import os
import sys

import numpy as np

from pycaffe_cli.commands.compute_image_mean import compute_mean, mean_blob_proto
from pycaffe_cli.data.db import backend_from_name
from pycaffe_cli.data.image_datum import DatumWriter
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.prototxt import write_blob_proto
from pycaffe_cli.log import LOG, run_script
from pycaffe_cli.proto import caffe_pb2

SIZE = 32
IMAGE_BYTES = 3 * SIZE * SIZE
RECORD_BYTES = 1 + IMAGE_BYTES
TRAIN_BATCHES = 5
CLASSES = 10


def read_batch(path):
    """(labels (N,), images (N, 3072)) of one CIFAR-10 binary batch file."""
    try:
        with open(path, "rb") as stream:
            raw = stream.read()
    except OSError as error:
        raise CaffeError(f"Unable to open CIFAR-10 batch {path}: {error.strerror}") from None
    if not raw or len(raw) % RECORD_BYTES:
        raise CaffeError(f"{path}: {len(raw)} bytes is not a whole number of "
                         f"{RECORD_BYTES}-byte CIFAR-10 records (label byte + 3x32x32 "
                         "pixels)")
    records = np.frombuffer(raw, np.uint8).reshape(-1, RECORD_BYTES)
    labels = records[:, 0]
    if labels.max() >= CLASSES:
        raise CaffeError(f"{path}: label {labels.max()} is not a CIFAR-10 class (0-9); "
                         "CIFAR-100 batches have a different record layout")
    return labels, records[:, 1:]


def _write(writer, labels, images, first_key):
    datum = caffe_pb2.Datum(channels=3, height=SIZE, width=SIZE)
    for offset, (label, image) in enumerate(zip(labels, images)):
        datum.label = int(label)
        datum.data = image.tobytes()
        writer.put(f"{first_key + offset:05d}", datum)
    return first_key + len(labels)


def convert_dataset(input_folder, output_folder, db_type="lmdb", mean=False):
    """Write the train and test databases (and the mean); return their paths."""
    backend = backend_from_name(db_type)
    train_path = os.path.join(output_folder, f"cifar10_train_{db_type}")
    test_path = os.path.join(output_folder, f"cifar10_test_{db_type}")
    batches = [os.path.join(input_folder, f"data_batch_{i}.bin")
               for i in range(1, TRAIN_BATCHES + 1)]
    test_batch = os.path.join(input_folder, "test_batch.bin")
    for path in batches + [test_batch]:
        if not os.path.isfile(path):
            raise CaffeError(f"Unable to open CIFAR-10 batch {path}: no such file")
    os.makedirs(output_folder, exist_ok=True)
    LOG.info("Writing Training data")
    with DatumWriter(train_path, backend, log_progress=False) as writer:
        key = 0
        for number, path in enumerate(batches, 1):
            LOG.info(f"Training Batch {number}")
            key = _write(writer, *read_batch(path), key)
    LOG.info("Writing Testing data")
    with DatumWriter(test_path, backend, log_progress=False) as writer:
        _write(writer, *read_batch(test_batch), 0)
    if mean:
        mean_path = os.path.join(output_folder, "mean.binaryproto")
        average, _ = compute_mean(train_path, backend)
        LOG.info(f"Write to {mean_path}")
        write_blob_proto(mean_path, mean_blob_proto(average))
    return train_path, test_path


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog=os.path.basename(__file__),
        description="Convert the CIFAR-10 binary batches to the lmdb/leveldb format used by "
                    "Caffe to perform classification.")
    parser.add_argument("input_folder", help="folder with data_batch_1..5.bin, test_batch.bin")
    parser.add_argument("output_folder", help="where cifar10_{train,test}_<db_type> go")
    parser.add_argument("db_type", nargs="?", default="lmdb", choices=["lmdb", "leveldb"],
                        help="database type (default lmdb)")
    parser.add_argument("--mean", action="store_true",
                        help="also write OUTPUT_FOLDER/mean.binaryproto (the training mean)")
    args = parser.parse_args(argv)
    return run_script(parser.prog, convert_dataset, args.input_folder, args.output_folder,
                      args.db_type, args.mean)


if __name__ == "__main__":
    sys.exit(main())
