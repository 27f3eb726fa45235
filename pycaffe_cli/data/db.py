"""Key-value databases of serialized Datums: Caffe's LMDB and (optionally) LevelDB backends.

``open_db(path, backend, mode)`` returns a DB with ``cursor()`` (mode "r") or
``transaction()`` (mode "w", "new"), mirroring Caffe's db.hpp interface:

    cursor.seek_to_first(); cursor.valid(); cursor.key(); cursor.value(); cursor.next()
    txn.put(key, value); txn.commit()

An LMDB is read by pycaffe's own page reader (lmdb_pages.py: a damaged file is a CaffeError,
where liblmdb can crash the process) and written through py-lmdb. ``NewDatabase`` makes a
database under a temporary name and renames it into place once complete, so a failed run
(disk full, read-only folder, a bad image) leaves no half-written database. LevelDB needs the
optional ``plyvel`` package; without it the error says so.
"""
import contextlib
import errno
import os
import shutil
import stat

import lmdb

from pycaffe_cli.data.lmdb_pages import LMDBPages
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.input_files import dir_problem, file_problem, shown
from pycaffe_cli.log import LOG
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
    return _open_lmdb(path, mode)


def _open_lmdb(path, mode):
    """An LMDB as Caffe's convert tools write it: its page reader, or a writable LMDBEnv."""
    if mode != "r":
        return LMDBEnv(path, mode)
    _check_folder(path, "LMDB")
    problem = file_problem(os.path.join(path, "data.mdb"))
    if problem:   # opening a pipe named data.mdb would block
        raise CaffeError(f"cannot open LMDB '{shown(path)}': data.mdb: {problem}")
    return LMDBPages(path)


class LMDBEnv:
    """An LMDB environment open for writing its one database."""

    def __init__(self, path, mode):
        self.path = path
        if mode == "new" and os.path.exists(path):
            raise CaffeError(f"cannot create LMDB '{path}': it already exists")
        os.makedirs(path, exist_ok=True)
        self._env = _open_env(path, map_size=_INITIAL_MAP_SIZE)

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


def _remove_stale_partials(folder, base):
    """Remove the temporary databases ``.<base>.partial-<pid>`` that killed runs left in
    ``folder``: only real folders of this user whose process is gone (a link, another user's
    folder or a running process's is left alone)."""
    prefix = f".{base}.partial-"
    try:
        names = [name for name in os.listdir(folder) if name.startswith(prefix)]
    except OSError:
        return
    for name in names:
        pid = name[len(prefix):]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        path = os.path.join(folder, name)
        try:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            LOG.info("Removing %s, left by a run that was killed (pid %s)", path, pid)
            shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue   # gone already, or the process exists (PermissionError: another user's)


class NewDatabase:
    """A database being made at ``path``, written under a temporary name in the same folder
    and renamed to ``path`` once complete, so that a failed or interrupted run leaves no
    half-written database. ``path`` must not exist yet (Caffe's ``mkdir`` CHECK). Any failure
    to write (a read-only folder, a full disk) is one CaffeError naming ``path``.

    As a context manager: ``finish()`` at the end of the block, ``discard()`` on an error.

    Args:
        path: the database to make.
        backend: caffe.DataParameter.LMDB or LEVELDB.
        tool: the command's name, put before error messages ("convert_imageset: ...").
    """

    def __init__(self, path, backend=caffe_pb2.DataParameter.LMDB, tool=""):
        self.path = path
        self._prefix = f"{tool}: " if tool else ""
        check_new_database(path, self._prefix)
        folder, base = os.path.split(os.path.abspath(path))
        self.temporary = os.path.join(folder, f".{base}.partial-{os.getpid()}")
        self._db = self._txn = None
        shutil.rmtree(self.temporary, ignore_errors=True)   # left by a killed run with our pid
        _remove_stale_partials(folder, base)
        try:
            with self._writing("create"):
                self._db = open_db(self.temporary, backend, "new")
                self._txn = self._db.transaction()
        except CaffeError as error:   # open_db's message names the temporary folder
            self.discard()
            message = str(error).replace(self.temporary, shown(path))
            raise CaffeError(f"{self._prefix}{message}") from None
        except BaseException:
            self.discard()
            raise

    def check_new(self):
        """Refuse a ``path`` that appeared since (see check_new_database)."""
        check_new_database(self.path, self._prefix)

    def put(self, key, value):
        """Add a record to the pending commit (str or bytes key and value)."""
        with self._writing("write"):
            self._txn.put(key, value)

    def commit(self):
        with self._writing("write"):
            self._txn.commit()
        self._txn = self._db.transaction()

    def close(self):
        """Commit what is pending and close; the database keeps its temporary name."""
        self.commit()
        db, self._db = self._db, None
        with self._writing("write"):
            db.close()

    def move_into_place(self):
        """Rename the closed database to ``path`` (refused if something appeared there)."""
        self.check_new()
        with self._writing("create"):
            os.rename(self.temporary, self.path)

    def finish(self):
        self.close()
        self.move_into_place()

    def discard(self):
        """Close without committing and remove the temporary database."""
        db, self._db = self._db, None
        if db is not None:
            try:
                db.close()
            except (OSError, lmdb.Error):
                pass   # it is being removed anyway
        shutil.rmtree(self.temporary, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, kind, error, trace):
        if kind is None:
            try:
                self.finish()
            except BaseException:
                self.discard()
                raise
        else:
            self.discard()

    @contextlib.contextmanager
    def _writing(self, action):
        try:
            yield
        except (OSError, lmdb.Error) as error:
            raise CaffeError(f"{self._prefix}cannot {action} database '{shown(self.path)}': "
                             f"{_write_problem(error)}") from None


def check_new_database(path, prefix=""):
    """Refuse to make a database at an existing ``path``, or where its folder is missing or
    is not a folder; ``prefix`` goes before the message ("convert_imageset: ")."""
    where = f"{prefix}cannot create database '{shown(path)}'"
    if os.path.lexists(path):
        raise CaffeError(f"{where}: it already exists")
    folder = os.path.dirname(os.path.abspath(path))
    problem = dir_problem(folder)
    if problem:
        raise CaffeError(f"{where}: folder '{shown(folder)}': {problem}")


def _write_problem(error):
    if isinstance(error, lmdb.MapFullError):
        return "the LMDB map is full (MDB_MAP_FULL)"
    if isinstance(error, OSError):
        return error.strerror or str(error)
    return str(error)


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
