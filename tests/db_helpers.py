"""Reading back the LMDBs that tests write: (key, Datum) pairs and a Datum's pixels."""
import numpy as np

from pycaffe_cli.data import db
from pycaffe_cli.proto import caffe_pb2


def read_db(path, message=caffe_pb2.Datum):
    """[(key, record)] in key order, each record parsed as ``message`` (a Datum, or an
    AnnotatedDatum for convert_annoset's databases)."""
    database = db.open_db(str(path))
    cursor, items = database.cursor(), []
    while cursor.valid():
        record = message()
        record.ParseFromString(cursor.value())
        items.append((cursor.key().decode(), record))
        cursor.next()
    database.close()
    return items


def read_annotated(path):
    """[(key, AnnotatedDatum)] in key order."""
    return read_db(path, caffe_pb2.AnnotatedDatum)


def pixels(datum):
    return np.frombuffer(datum.data, np.uint8).reshape(datum.channels, datum.height,
                                                       datum.width)
