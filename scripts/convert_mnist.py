#!/usr/bin/env python3
"""Convert MNIST's IDX files to an LMDB/LevelDB of Datums (Caffe's convert_mnist_data).

    python scripts/convert_mnist.py [--backend lmdb] IMAGE_FILE LABEL_FILE DB_PATH

The image file is IDX with magic 2051 (count, rows, cols, then uint8 pixels), the label file
IDX with magic 2049 (count, then uint8 labels), both big-endian and optionally gzipped
(``.gz``). Each image becomes a raw 1 x rows x cols Datum under the key "%08d" (its index),
as Caffe's converter writes them. Nothing is downloaded.
"""
import argparse
import gzip
import os
import sys

import numpy as np

from pycaffe_cli.data.db import backend_from_name
from pycaffe_cli.data.image_datum import DatumWriter
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG, run_script
from pycaffe_cli.proto import caffe_pb2

IMAGE_MAGIC, LABEL_MAGIC = 2051, 2049
_GZIP_MAGIC = b"\x1f\x8b"


def read_idx_bytes(path):
    """The file's bytes, gunzipped when it is gzip data (whatever its name)."""
    try:
        with open(path, "rb") as stream:
            raw = stream.read()
    except OSError as error:
        raise CaffeError(f"Unable to open file {path}: {error.strerror}") from None
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as error:
            raise CaffeError(f"{path}: broken gzip data ({error})") from None
    return raw


def _header(raw, path, magic, what, fields):
    size = 4 * (1 + fields)
    if len(raw) < size:
        raise CaffeError(f"{path}: too short for an MNIST {what} file ({len(raw)} bytes)")
    values = np.frombuffer(raw, ">u4", 1 + fields)
    if values[0] != magic:
        raise CaffeError(f"Incorrect {what} file magic. {path} starts with {values[0]}, "
                         f"expected {magic} (an IDX {what} file, big-endian)")
    return [int(v) for v in values[1:]], size


def read_idx_images(path):
    """(N, rows, cols) uint8 images of an IDX image file (magic 2051)."""
    raw = read_idx_bytes(path)
    (count, rows, cols), offset = _header(raw, path, IMAGE_MAGIC, "image", 3)
    need = count * rows * cols
    if len(raw) - offset < need:
        raise CaffeError(f"{path}: holds {len(raw) - offset} pixel bytes; {count} images of "
                         f"{rows}x{cols} need {need}")
    return np.frombuffer(raw, np.uint8, need, offset).reshape(count, rows, cols)


def read_idx_labels(path):
    """(N,) uint8 labels of an IDX label file (magic 2049)."""
    raw = read_idx_bytes(path)
    (count,), offset = _header(raw, path, LABEL_MAGIC, "label", 1)
    if len(raw) - offset < count:
        raise CaffeError(f"{path}: holds {len(raw) - offset} labels; its header says {count}")
    return np.frombuffer(raw, np.uint8, count, offset)


def convert_dataset(image_path, label_path, db_path, backend="lmdb"):
    """Write the IDX pair to a new database; return the number of items."""
    db_backend = backend_from_name(backend)
    images = read_idx_images(image_path)
    labels = read_idx_labels(label_path)
    if len(images) != len(labels):
        raise CaffeError(f"{image_path} has {len(images)} images but {label_path} has "
                         f"{len(labels)} labels")
    count, rows, cols = images.shape
    LOG.info(f"Opening {backend} {db_path}")
    datum = caffe_pb2.Datum(channels=1, height=rows, width=cols)
    LOG.info(f"A total of {count} items.")
    LOG.info(f"Rows: {rows} Cols: {cols}")
    with DatumWriter(db_path, db_backend, log_progress=False) as writer:
        for item_id in range(count):
            datum.data = images[item_id].tobytes()
            datum.label = int(labels[item_id])
            writer.put(f"{item_id:08d}", datum)
    LOG.info(f"Processed {count} files.")
    return count


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog=os.path.basename(__file__),
        description="Convert the MNIST dataset (IDX files) to the lmdb/leveldb format used "
                    "by Caffe to load data.")
    parser.add_argument("image_file", help="IDX image file (e.g. train-images-idx3-ubyte[.gz])")
    parser.add_argument("label_file", help="IDX label file (e.g. train-labels-idx1-ubyte[.gz])")
    parser.add_argument("db_path", help="the database to create")
    parser.add_argument("--backend", default="lmdb", choices=["lmdb", "leveldb"],
                        help="the backend for storing the result (default lmdb)")
    args = parser.parse_args(argv)
    return run_script(parser.prog, convert_dataset, args.image_file, args.label_file,
                      args.db_path, args.backend)


if __name__ == "__main__":
    sys.exit(main())
