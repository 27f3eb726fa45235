"""atomic_write / atomic_output_path: all or nothing, no temporary files left behind."""
import os
import stat

import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.files import atomic_output_path, atomic_write, read_bytes


def test_atomic_write_replaces_file(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with atomic_write(target, "wb") as stream:
        stream.write(b"new contents")
        assert target.read_bytes() == b"old"  # not visible until the block ends
    assert target.read_bytes() == b"new contents"
    assert os.listdir(tmp_path) == ["out.bin"]


def test_atomic_write_text_mode(tmp_path):
    target = tmp_path / "net.prototxt"
    with atomic_write(target, "w") as stream:
        stream.write('name: "héllo"\n')
    assert target.read_text(encoding="utf-8") == 'name: "héllo"\n'


def test_failure_keeps_old_file_and_cleans_up(tmp_path):
    target = tmp_path / "snapshot.caffemodel"
    target.write_bytes(b"complete old snapshot")
    with pytest.raises(KeyboardInterrupt):
        with atomic_write(target, "wb") as stream:
            stream.write(b"half of the new one")
            raise KeyboardInterrupt
    assert target.read_bytes() == b"complete old snapshot"
    assert os.listdir(tmp_path) == ["snapshot.caffemodel"]


def test_failure_without_old_file_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_write(tmp_path / "new.bin") as stream:
            stream.write(b"x")
            raise RuntimeError("killed")
    assert os.listdir(tmp_path) == []


def test_new_file_gets_umask_permissions(tmp_path):
    target = tmp_path / "f.bin"
    with atomic_write(target) as stream:
        stream.write(b"x")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o666 & ~mask


def test_existing_file_keeps_its_permissions(tmp_path):
    target = tmp_path / "f.bin"
    target.write_bytes(b"x")
    os.chmod(target, 0o640)
    with atomic_write(target) as stream:
        stream.write(b"y")
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640


def test_missing_folder_is_a_caffe_error(tmp_path):
    with pytest.raises(CaffeError, match=r"cannot write '.*nowhere/f\.bin': No such file"):
        with atomic_write(tmp_path / "nowhere" / "f.bin") as stream:
            stream.write(b"x")


def test_atomic_output_path(tmp_path):
    target = tmp_path / "w.h5"
    with atomic_output_path(target) as temp_path:
        assert os.path.dirname(temp_path) == str(tmp_path)
        with open(temp_path, "wb") as stream:
            stream.write(b"data")
        assert not target.exists()
    assert target.read_bytes() == b"data"
    with pytest.raises(ValueError):
        with atomic_output_path(target) as temp_path:
            with open(temp_path, "wb") as stream:
                stream.write(b"broken")
            raise ValueError
    assert target.read_bytes() == b"data"
    assert os.listdir(tmp_path) == ["w.h5"]


def test_read_bytes_errors(tmp_path):
    with pytest.raises(CaffeError, match="cannot read net file '.*x.prototxt': No such file or "
                                         "directory"):
        read_bytes(tmp_path / "x.prototxt", "net file")
    with pytest.raises(CaffeError, match="Is a directory"):
        read_bytes(tmp_path, "net file")
