"""Images to and from Datums, as Caffe's util/io.cpp does it (decoding: data/image.py).

A raw Datum stores an image channel-major (``channels x height x width`` uint8, colour in
OpenCV's BGR order), an encoded one the bytes of an image file. Reading, decoding and
resizing images the way OpenCV does is ``pycaffe_cli.data.image``; this module adds the
Datum side of Caffe's tools:

- ``read_image_to_datum`` is ReadImageToDatum (raw or encoded; the file's own bytes are kept
  when they already have the wanted encoding),
- ``image_to_datum`` is CVMatToDatum, ``decode_datum_native`` is DecodeDatumNative,
- ``DatumWriter`` is the tools' "put, commit every 1000, log Processed N files." loop.
"""
import io

import numpy as np
from PIL import Image

from pycaffe_cli.data.db import NewDatabase
from pycaffe_cli.data.image import decode_image, read_image
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.input_files import IMAGE_LIMIT, read_input_bytes
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2

_JPEG_QUALITY = 95  # cv::imencode's default
_PNG_COMPRESSION = 3


def image_to_datum(pixels, label=None):
    """A raw Datum of (C, H, W) uint8 pixels (Caffe's CVMatToDatum)."""
    if pixels.dtype != np.uint8:
        raise CaffeError("Image data type must be unsigned byte")
    datum = caffe_pb2.Datum()
    datum.channels, datum.height, datum.width = pixels.shape
    datum.data = np.ascontiguousarray(pixels).tobytes()
    datum.encoded = False  # set explicitly, as CVMatToDatum does (it is serialised)
    if label is not None:
        datum.label = label
    return datum


def image_format(encoding):
    """Pillow's format name for an encoding such as "png", ".jpg" or "JPEG"."""
    extension = "." + encoding.lower().lstrip(".")
    name = Image.registered_extensions().get(extension)
    if name is None or name not in Image.SAVE:
        raise CaffeError(f'unknown image encoding "{encoding}" (use an image file extension '
                         'such as png, jpg, bmp)')
    return name


def encode_image(pixels, encoding):
    """The bytes of (C, H, W) uint8 gray/BGR pixels saved as ``encoding`` (cv::imencode)."""
    name = image_format(encoding)
    if pixels.shape[0] == 1:
        picture = Image.fromarray(pixels[0], "L")
    else:
        picture = Image.fromarray(np.ascontiguousarray(pixels[::-1].transpose(1, 2, 0)), "RGB")
    options = {"JPEG": {"quality": _JPEG_QUALITY},
               "PNG": {"compress_level": _PNG_COMPRESSION}}.get(name, {})
    buffer = io.BytesIO()
    picture.save(buffer, format=name, **options)
    return buffer.getvalue()


def _extension_matches(filename, encoding):
    """Caffe's matchExt: the file's extension (with its dot) equals the encoding."""
    dot = filename.rfind(".")
    extension = filename[dot:].lower() if dot >= 0 else filename.lower()
    encoding = encoding.lower()
    return extension == encoding or (encoding == "jpg" and extension == "jpeg")


def read_image_to_datum(path, label, height=0, width=0, is_color=True, encoding=""):
    """Caffe's ReadImageToDatum: a raw Datum, or an encoded one when ``encoding`` is given.

    With an encoding, no resize and a file whose extension already matches (Caffe's
    matchExt, which compares ".png" with the encoding as given), the file's own bytes are
    stored; otherwise the decoded (resized, gray) image is encoded anew. Returns None when
    the image cannot be read.
    """
    try:
        image = read_image(path, height, width, is_color)
    except CaffeError:
        return None
    if not encoding:
        return image_to_datum(image, label)
    datum = caffe_pb2.Datum()
    if not (height > 0 or width > 0) and _extension_matches(path, encoding):
        datum.data = read_input_bytes(path, "image file", IMAGE_LIMIT)
    else:
        datum.data = encode_image(image, encoding)
    datum.encoded = True
    datum.label = label
    return datum


def decode_datum_native(datum):
    """Caffe's DecodeDatumNative: an encoded Datum becomes a raw one (label kept).

    Returns:
        True when the datum was encoded (and is now raw), False when it already was raw.
    """
    if not datum.encoded:
        return False
    label = datum.label
    pixels = decode_image(datum.data, None, "the encoded Datum")  # the image's own kind
    datum.CopyFrom(image_to_datum(pixels, label))
    return True


def datum_values(datum):
    """The Datum's values as a flat array: uint8 from ``data``, else float32 ``float_data``."""
    if datum.data:
        return np.frombuffer(datum.data, np.uint8)
    return np.array(datum.float_data, np.float32)


class DatumWriter:
    """Put Datums into a new database, committing every ``commit_every`` as Caffe's tools do
    (each commit logged "Processed N files."). The database is written under a temporary
    name and renamed to ``path`` when the ``with`` block ends without an error; on an error
    it is removed (db.NewDatabase)."""

    def __init__(self, path, backend=caffe_pb2.DataParameter.LMDB, commit_every=1000,
                 log_progress=True, tool=""):
        self._db = NewDatabase(path, backend, tool)
        self._commit_every = commit_every
        self._log = log_progress
        self.count = 0

    def put(self, key, datum):
        self._db.put(key, datum.SerializeToString())
        self.count += 1
        if self.count % self._commit_every == 0:
            self._commit()

    def _commit(self):
        self._db.commit()
        if self._log:
            LOG.info(f"Processed {self.count} files.")

    def close(self):
        """Commit the last batch and move the finished database into place."""
        if self.count % self._commit_every:
            self._commit()
        self._db.finish()

    def __enter__(self):
        return self

    def __exit__(self, kind, error, trace):
        if kind is None:
            try:
                self.close()
            except BaseException:
                self._db.discard()
                raise
        else:
            self._db.discard()
