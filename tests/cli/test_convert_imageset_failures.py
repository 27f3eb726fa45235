"""convert_imageset's failures: one line naming the path or the flag, exit 1 (2 for a bad
flag value), and never a database left half written.

The database is written under a temporary name beside DB_NAME and renamed when complete
(pycaffe_cli/data/db.py's NewDatabase); these tests make each step fail: a DB_NAME inside a
regular file, a read-only folder, a full disk on a put or a commit, a bad image, Ctrl-C.
"""
import errno
import os

import lmdb
import numpy as np
import pytest
from PIL import Image

from pycaffe_cli.data import db, image_datum
from tests.db_helpers import read_db


@pytest.fixture
def images(tmp_path):
    """(ROOTFOLDER/, LISTFILE) for three 4x5 PNGs (the last one 5x5)."""
    folder = tmp_path / "img"
    folder.mkdir()
    rng = np.random.default_rng(3)
    for name, width in (("a.png", 5), ("b.png", 5), ("c.png", 4)):
        Image.fromarray(rng.integers(0, 256, (4, width, 3), dtype=np.uint8)).save(folder / name)
    listing = tmp_path / "list.txt"
    listing.write_text("a.png 0\nb.png 1\nc.png 2\n")
    return f"{folder}/", str(listing)


def leftovers(folder, name):
    """Entries of ``folder`` that are the database ``name`` or a temporary copy of it."""
    return [entry for entry in os.listdir(folder) if name in entry]


def test_database_path_inside_a_regular_file(run_cli, images):
    root, listing = images
    result = run_cli("convert_imageset", root, listing, f"{listing}/db")
    result.one_error(f"'{listing}/db'", "not a folder")


def test_existing_output_is_refused_and_left_alone(run_cli, images, tmp_path):
    root, listing = images
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep")
    result = run_cli("convert_imageset", root, listing, tmp_path / "out")
    result.one_error(str(tmp_path / "out"), "already exists")
    assert os.listdir(tmp_path / "out") == ["mine.txt"]
    assert leftovers(tmp_path, ".out") == []


def test_read_only_folder(run_cli, images, tmp_path, monkeypatch):
    """A read-only file system, simulated: the folder cannot be made."""
    root, listing = images

    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
    monkeypatch.setattr(db.os, "makedirs", read_only)
    result = run_cli("convert_imageset", root, listing, tmp_path / "out")
    result.one_error(str(tmp_path / "out"), "Read-only file system")
    assert leftovers(tmp_path, "out") == []


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="needs a user whom file permissions stop (not root)")
def test_folder_without_write_permission(run_cli, images, tmp_path):
    root, listing = images
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        result = run_cli("convert_imageset", root, listing, locked / "out")
    finally:
        locked.chmod(0o755)
    result.one_error(str(locked / "out"), "Permission denied")
    assert os.listdir(locked) == []


@pytest.mark.parametrize("failure", [
    pytest.param(lmdb.MapFullError("mdb_put: MDB_MAP_FULL"), id="map-full"),
    pytest.param(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), id="enospc"),
    pytest.param(lmdb.Error("mdb_txn_commit: No space left on device"), id="lmdb-disk"),
])
@pytest.mark.parametrize("step", ["put", "commit"])
def test_full_disk(run_cli, images, tmp_path, monkeypatch, failure, step):
    root, listing = images
    calls = []
    real = getattr(db.LMDBTransaction, step)

    def fail_on_second(self, *args):
        calls.append(1)
        if len(calls) == 2 or step == "commit":
            raise failure
        return real(self, *args)
    monkeypatch.setattr(db.LMDBTransaction, step, fail_on_second)
    result = run_cli("convert_imageset", root, listing, tmp_path / "out")
    line = result.one_error(str(tmp_path / "out"), "cannot write database")
    assert ("full" in line or "No space left" in line), line
    assert leftovers(tmp_path, "out") == []


def test_a_failure_mid_run_leaves_no_database(run_cli, images, tmp_path):
    """--check_size stops at the 4x4 image, after two were written and committed."""
    root, listing = images
    result = run_cli("convert_imageset", "--check_size", root, listing, tmp_path / "out")
    result.one_error("c.png", "incorrect data field size")
    assert leftovers(tmp_path, "out") == []


def test_commits_along_the_way_still_leave_nothing(run_cli, images, tmp_path, monkeypatch):
    """Committed batches live in the temporary database until the last one is written."""
    root, listing = images
    monkeypatch.setattr(image_datum.DatumWriter.__init__, "__defaults__",
                        (db.caffe_pb2.DataParameter.LMDB, 1, True, ""))
    result = run_cli("convert_imageset", "--check_size", root, listing, tmp_path / "out")
    assert "Processed 2 files." in result.err
    result.one_error("c.png")
    assert leftovers(tmp_path, "out") == []


def test_interrupted_run_leaves_no_database(run_cli, images, tmp_path, monkeypatch):
    root, listing = images
    real = image_datum.read_image_to_datum

    def interrupted(path, *args):
        if path.endswith("b.png"):
            raise KeyboardInterrupt
        return real(path, *args)
    monkeypatch.setattr(image_datum, "read_image_to_datum", interrupted)
    result = run_cli("convert_imageset", root, listing, tmp_path / "out")
    assert result.code == 130
    assert leftovers(tmp_path, "out") == []


def test_success_renames_the_finished_database(run_cli, images, tmp_path):
    root, listing = images
    result = run_cli("convert_imageset", root, listing, tmp_path / "out")
    assert result.code == 0, result.err
    assert [key for key, _ in read_db(tmp_path / "out")] == [
        "00000000_a.png", "00000001_b.png", "00000002_c.png"]
    assert leftovers(tmp_path, "out") == ["out"]


@pytest.mark.parametrize("flag", ["--resize_height", "--resize_width"])
def test_negative_resize_is_refused(run_cli, images, tmp_path, flag):
    root, listing = images
    result = run_cli("convert_imageset", f"{flag}=-1", root, listing, tmp_path / "out")
    assert result.code == 2, result.err
    assert "Traceback" not in result.err
    [line] = result.error_lines()
    assert f"'{flag}'" in line and "-1" in line
    assert leftovers(tmp_path, "out") == []


def test_zero_resize_means_no_resize(run_cli, images, tmp_path):
    root, listing = images
    result = run_cli("convert_imageset", "--resize_height=0", "--resize_width=0", root,
                     listing, tmp_path / "out")
    assert result.code == 0, result.err
    shapes = {(d.height, d.width) for _, d in read_db(tmp_path / "out")}
    assert shapes == {(4, 5), (4, 4)}
