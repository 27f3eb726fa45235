"""Key-value databases of serialized Datums: Caffe's LMDB and (optionally) LevelDB backends.

``open_db(path, backend, mode)`` returns a DB with ``cursor()`` (mode "r") or
``transaction()`` (mode "w", "new"), mirroring Caffe's db.hpp interface:

    cursor.seek_to_first(); cursor.valid(); cursor.key(); cursor.value(); cursor.next()
    txn.put(key, value); txn.commit()

LevelDB needs the optional ``plyvel`` package; without it the error says so.
"""
import errno
import os

import lmdb

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.input_files import dir_problem, file_problem, shown
from pycaffe_cli.proto import caffe_pb2

_INITIAL_MAP_SIZE = 1 << 30


def backend_from_name(name):
    """caffe.DataParameter.DB value for "lmdb" / "leveldb" (case-insensitive)."""
    value = {"lmdb": caffe_pb2.DataParameter.LMDB,
             "leveldb": caffe_pb2.DataParameter.LEVELDB}.get(name.lower())
    if value is None:
        raise CaffeError(f'unknown database backend "{name}" (known: lmdb, leveldb)')
    return value


def open_db(path, backend=caffe_pb2.DataParameter.LMDB, mode="r"):
    """Open a database; mode "r" reads, "new" creates (the folder must not exist), "w" writes.

    Raises:
        CaffeError: missing or unreadable database, existing target for "new", missing
            LevelDB support.
    """
    if backend == caffe_pb2.DataParameter.LEVELDB:
        return LevelDB(path, mode)
    return LMDB(path, mode)


class LMDB:
    """An LMDB environment holding one database, as Caffe's convert tools write it."""

    def __init__(self, path, mode):
        self.path = path
        if mode == "r":
            _check_folder(path, "LMDB")
            problem = file_problem(os.path.join(path, "data.mdb"))
            if problem:   # opening a pipe named data.mdb would block
                raise CaffeError(f"cannot open LMDB '{shown(path)}': data.mdb: {problem}")
            self._env = _open_env(path, readonly=True, lock=False, readahead=False,
                                  max_readers=256)
        else:
            if mode == "new" and os.path.exists(path):
                raise CaffeError(f"cannot create LMDB '{path}': it already exists")
            os.makedirs(path, exist_ok=True)
            self._env = _open_env(path, map_size=_INITIAL_MAP_SIZE)

    def cursor(self):
        return LMDBCursor(self._env)

    def transaction(self):
        return LMDBTransaction(self._env)

    def __len__(self):
        return self._env.stat()["entries"]

    def close(self):
        self._env.close()


def _check_folder(path, kind):
    """A database read must be an existing folder (not a file, a pipe, a device)."""
    problem = dir_problem(path)
    if problem == os.strerror(errno.ENOENT):
        problem = "no such database folder"
    if problem:
        raise CaffeError(f"cannot open {kind} '{shown(path)}': {problem}")


def _open_env(path, **options):
    try:
        return lmdb.open(path, subdir=True, **options)
    except lmdb.Error as error:
        raise CaffeError(f"cannot open LMDB '{path}': {error}") from None


class LMDBCursor:
    """A read cursor that stays at a record until ``next()``."""

    def __init__(self, env):
        self._txn = env.begin(buffers=False)
        self._cursor = self._txn.cursor()
        self._valid = self._cursor.first()

    def seek_to_first(self):
        self._valid = self._cursor.first()

    def seek(self, key):
        """Move to ``key`` (bytes); False if the database has no such key."""
        self._valid = self._cursor.set_key(key)
        return self._valid

    def next(self):
        self._valid = self._cursor.next()

    def valid(self):
        return self._valid

    def key(self):
        return self._cursor.key()

    def value(self):
        return self._cursor.value()


class LMDBTransaction:
    """Buffered puts, committed together; the map grows when it fills (Caffe uses 1 TB)."""

    def __init__(self, env):
        self._env = env
        self._pending = []

    def put(self, key, value):
        self._pending.append((_as_bytes(key), _as_bytes(value)))

    def commit(self):
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    for key, value in self._pending:
                        txn.put(key, value)
                break
            except lmdb.MapFullError:
                self._env.set_mapsize(self._env.info()["map_size"] * 2)
        self._pending = []


class LevelDB:
    """LevelDB through the optional plyvel binding."""

    def __init__(self, path, mode):
        try:
            import plyvel
        except ImportError:
            raise CaffeError(f"cannot open LevelDB '{path}': the LEVELDB backend needs the "
                             "optional 'plyvel' package (pip install plyvel), or convert the "
                             "data to LMDB") from None
        if mode == "r":
            _check_folder(path, "LevelDB")
        try:
            self._db = plyvel.DB(path, create_if_missing=mode != "r",
                                 error_if_exists=mode == "new")
        except plyvel.Error as error:
            raise CaffeError(f"cannot open LevelDB '{path}': {error}") from None

    def cursor(self):
        return LevelDBCursor(self._db)

    def transaction(self):
        return LevelDBTransaction(self._db)

    def close(self):
        self._db.close()


class LevelDBCursor:
    def __init__(self, db):
        self._db = db
        self.seek_to_first()

    def seek_to_first(self):
        self._iterator = self._db.iterator()
        self.next()

    def seek(self, key):
        self._iterator = self._db.iterator(start=key)
        self.next()
        return self._valid and self._item[0] == key

    def next(self):
        self._item = next(self._iterator, None)
        self._valid = self._item is not None

    def valid(self):
        return self._valid

    def key(self):
        return self._item[0]

    def value(self):
        return self._item[1]


class LevelDBTransaction:
    def __init__(self, db):
        self._batch = db.write_batch()

    def put(self, key, value):
        self._batch.put(_as_bytes(key), _as_bytes(value))

    def commit(self):
        self._batch.write()


def _as_bytes(value):
    return value.encode() if isinstance(value, str) else bytes(value)
