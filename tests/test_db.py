"""The LMDB wrapper: write, read back in key order, seek, grow the map, clear errors."""
import pytest

from pycaffe_cli.data import db
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.proto import caffe_pb2


def test_write_then_read_in_key_order_and_seek(tmp_path):
    path = str(tmp_path / "lmdb")
    database = db.open_db(path, mode="new")
    txn = database.transaction()
    for i in (2, 0, 1):
        txn.put(f"{i:08d}", f"value{i}".encode())
    txn.commit()
    database.close()
    reader = db.open_db(path)
    assert len(reader) == 3
    cursor = reader.cursor()
    seen = []
    while cursor.valid():
        seen.append((cursor.key(), cursor.value()))
        cursor.next()
    assert seen == [(b"00000000", b"value0"), (b"00000001", b"value1"), (b"00000002", b"value2")]
    assert cursor.seek(b"00000001") and cursor.value() == b"value1"
    cursor.seek_to_first()
    assert cursor.key() == b"00000000"


def test_map_grows_when_full(tmp_path, monkeypatch):
    monkeypatch.setattr(db, "_INITIAL_MAP_SIZE", 64 * 1024)
    database = db.open_db(str(tmp_path / "grow"), mode="new")
    txn = database.transaction()
    for i in range(64):
        txn.put(f"{i:08d}", bytes(4096))
    txn.commit()
    assert len(database) == 64


def test_errors_are_clear(tmp_path):
    with pytest.raises(CaffeError, match="cannot open LMDB '.*missing': no such database"):
        db.open_db(str(tmp_path / "missing"))
    (tmp_path / "exists").mkdir()
    with pytest.raises(CaffeError, match="already exists"):
        db.open_db(str(tmp_path / "exists"), mode="new")
    with pytest.raises(CaffeError, match="unknown database backend"):
        db.backend_from_name("rocksdb")
    try:
        import plyvel  # noqa: F401
    except ImportError:
        with pytest.raises(CaffeError, match="needs the optional 'plyvel' package"):
            db.open_db(str(tmp_path), caffe_pb2.DataParameter.LEVELDB)


def test_a_new_database_removes_only_the_temporaries_of_killed_runs(tmp_path):
    """A killed convert_imageset leaves .<name>.partial-<pid>; the next run removes those whose
    process is gone, and leaves a running process's, a link and a file alone."""
    import os
    import subprocess
    import sys
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stale = tmp_path / f".out.partial-{dead}"
    stale.mkdir()
    (stale / "data.mdb").write_bytes(b"x")
    alive = tmp_path / f".out.partial-{os.getppid()}"
    alive.mkdir()
    target = tmp_path / "precious"
    target.mkdir()
    (target / "keep").write_text("k")
    link = tmp_path / ".out.partial-999999999"
    link.symlink_to(target)
    with db.NewDatabase(str(tmp_path / "out")) as made:
        made.put(b"k", b"v")
    assert (tmp_path / "out").is_dir()
    assert not stale.exists()
    assert alive.is_dir()
    assert link.is_symlink() and (target / "keep").read_text() == "k"
