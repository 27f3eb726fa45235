"""pycaffe's own LMDB reader: the same records in the same order as liblmdb, and damage as a
CaffeError where liblmdb would read past the file (SIGBUS)."""
import os
import random
import struct

import lmdb
import pytest

from pycaffe_cli.data.db import open_db
from pycaffe_cli.data.lmdb_pages import LMDBPages
from pycaffe_cli.errors import CaffeError

PAGE = 4096


def build(path, count, max_value, seed=0):
    """An LMDB written by liblmdb: random keys and values (inline and on overflow pages),
    then deletes and overwrites in a second transaction; returns {key: value}."""
    rng = random.Random(seed)
    env = lmdb.open(str(path), map_size=1 << 28)
    items = {}
    with env.begin(write=True) as txn:
        for i in range(count):
            key = (rng.randbytes(rng.randint(1, 40)) if i % 2
                   else f"{i:08d}_file.png".encode())
            value = rng.randbytes(rng.choice([0, 3, 100, rng.randint(0, max_value)]))
            txn.put(key, value)
            items[key] = value
    with env.begin(write=True) as txn:
        for key in list(items)[:count // 5]:
            txn.delete(key)
            del items[key]
        for key in list(items)[:count // 10]:
            items[key] = rng.randbytes(rng.randint(0, max_value))
            txn.put(key, items[key])
    env.close()
    return items


def read_all(database):
    cursor, seen = database.cursor(), []
    while cursor.valid():
        seen.append((cursor.key(), cursor.value()))
        cursor.next()
    return seen


@pytest.mark.parametrize("count, max_value", [
    (0, 10), (1, 10), (7, 20000), (3000, 100), (1500, 9000)])
def test_same_records_as_liblmdb(tmp_path, count, max_value):
    items = build(tmp_path / "db", count, max_value, seed=count)
    database = open_db(str(tmp_path / "db"))
    assert isinstance(database, LMDBPages)
    assert read_all(database) == sorted(items.items())
    assert len(database) == len(items)
    keys = sorted(items)
    cursor = database.cursor()
    for key in random.Random(1).sample(keys, min(40, len(keys))):
        assert cursor.seek(key) and cursor.value() == items[key]
        cursor.next()
        following = keys.index(key) + 1
        assert cursor.valid() == (following < len(keys))
        if cursor.valid():
            assert cursor.key() == keys[following]
    assert not cursor.seek(b"\xff" * 50) and not cursor.valid()
    cursor.seek_to_first()
    assert cursor.valid() == bool(keys)


def test_reads_without_a_lock_file_on_a_read_only_copy(tmp_path):
    items = build(tmp_path / "db", 50, 100)
    os.remove(tmp_path / "db" / "lock.mdb")
    os.chmod(tmp_path / "db" / "data.mdb", 0o444)
    assert read_all(open_db(str(tmp_path / "db"))) == sorted(items.items())


@pytest.fixture
def small_db(tmp_path):
    """(folder, data.mdb bytes) of 100 records over several leaf pages."""
    env = lmdb.open(str(tmp_path / "db"), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i in range(100):
            txn.put(f"{i:08d}".encode(), bytes(90))
        txn.put(b"big", bytes(10000))
    env.close()
    return tmp_path / "db", (tmp_path / "db" / "data.mdb").read_bytes()


def pages_of_kind(data, flag):
    return [p for p in range(len(data) // PAGE)
            if struct.unpack_from("<H", data, p * PAGE + 10)[0] & flag]


def damage(folder, data, offset, new_bytes):
    copy = bytearray(data)
    copy[offset:offset + len(new_bytes)] = new_bytes
    (folder / "data.mdb").write_bytes(bytes(copy))


def test_truncated_file_is_refused_at_open(small_db):
    folder, data = small_db
    (folder / "data.mdb").write_bytes(data[:len(data) - PAGE - 10])
    with pytest.raises(CaffeError, match=r"is damaged: data.mdb has \d+ bytes.*truncated"):
        open_db(str(folder))


def test_not_an_lmdb(small_db):
    folder, data = small_db
    damage(folder, data, 16, b"\0\0\0\0")   # meta page 0's magic
    with pytest.raises(CaffeError, match="data.mdb is not an LMDB file"):
        open_db(str(folder))


def test_node_offset_past_the_page(small_db):
    """The flip that makes liblmdb read past the end of the file: a node offset's high
    byte (what crashed py-lmdb with SIGBUS)."""
    folder, data = small_db
    leaf = pages_of_kind(data, 0x02)[-1]
    damage(folder, data, leaf * PAGE + 17, b"\x8e")
    database = open_db(str(folder))
    with pytest.raises(CaffeError, match=rf"page {leaf}: node 0 lies outside the page"):
        read_all(database)


def test_overflow_size_past_the_file(small_db):
    folder, data = small_db
    leaf = next(p for p in pages_of_kind(data, 0x02) if b"big" in data[p * PAGE:(p + 1) * PAGE])
    node = data.index(b"big", leaf * PAGE) - 8
    damage(folder, data, node + 2, b"\x00\x7f")   # the data size's high half
    with pytest.raises(CaffeError, match=r"bytes of data on page \d+ would run past"):
        read_all(open_db(str(folder)))


def test_child_pointing_at_the_wrong_page(small_db):
    folder, data = small_db
    [branch] = pages_of_kind(data, 0x01)
    lower = struct.unpack_from("<H", data, branch * PAGE + 12)[0]
    last_node = struct.unpack_from("<H", data, branch * PAGE + lower - 2)[0]
    damage(folder, data, branch * PAGE + last_node, struct.pack("<H", branch))  # itself
    with pytest.raises(CaffeError, match=f"page {branch} is not the leaf page"):
        read_all(open_db(str(folder)))
