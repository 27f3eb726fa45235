"""Reading back the LMDBs that tests write: (key, Datum) pairs and a Datum's pixels."""
import numpy as np

from pycaffe_cli.data import db
from pycaffe_cli.proto import caffe_pb2


def read_db(path):
    """[(key, Datum)] in key order."""
    database = db.open_db(str(path))
    cursor, items = database.cursor(), []
    while cursor.valid():
        datum = caffe_pb2.Datum()
        datum.ParseFromString(cursor.value())
        items.append((cursor.key().decode(), datum))
        cursor.next()
    database.close()
    return items


def pixels(datum):
    return np.frombuffer(datum.data, np.uint8).reshape(datum.channels, datum.height,
                                                       datum.width)
