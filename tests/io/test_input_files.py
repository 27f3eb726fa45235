"""Input files are checked before they are opened: regular files only, size limits, paths no
file can have; and the file fields of nets and solvers are checked when they are read."""
import contextlib
import os
import signal

import pytest
from google.protobuf import text_format

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.input_files import (PROTOTXT_LIMIT, SizeLimit, check_input_file,
                                        dir_problem, file_problem, path_problem,
                                        read_input_bytes, read_input_text, shown)
from pycaffe_cli.io.path_fields import check_path_fields, path_values
from pycaffe_cli.io.prototxt import read_solver_param
from pycaffe_cli.io.weights import is_hdf5_weights
from pycaffe_cli.net.net import Net
from pycaffe_cli.proto import caffe_pb2


@contextlib.contextmanager
def no_hang(seconds=10):
    """Fail instead of blocking forever (opening a FIFO without a writer blocks)."""
    def give_up(signum, frame):
        raise TimeoutError("blocked: the file was opened")
    previous = signal.signal(signal.SIGALRM, give_up)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return str(path)


def test_a_regular_file_is_read_whole(tmp_path):
    path = tmp_path / "list.txt"
    path.write_bytes(b"a.png 0\n\xff.png 1\n")
    assert file_problem(path) is None
    assert read_input_bytes(path, "list") == b"a.png 0\n\xff.png 1\n"
    # bytes that are not UTF-8 come back to the file system unchanged
    assert os.fsencode(read_input_text(path, "list").split()[2]) == b"\xff.png"


@pytest.mark.parametrize("path, problem", [
    ("/dev/null", "Is a character device, not a regular file"),
    ("/", "Is a directory, not a regular file"),
    ("/no/such/file", "No such file or directory"),
])
def test_what_is_not_a_regular_file_is_named(path, problem):
    assert file_problem(path) == problem
    with pytest.raises(CaffeError, match=f"^cannot read net file '{path}': {problem}$"):
        check_input_file(path, "net file")


def test_a_fifo_is_refused_without_being_opened(fifo):
    with no_hang():
        with pytest.raises(CaffeError, match=r"cannot read weights file '.*pipe': Is a named "
                                             r"pipe \(FIFO\), not a regular file"):
            read_input_bytes(fifo, "weights file")
        assert not is_hdf5_weights(fifo)


def test_size_limit_is_checked_before_reading(tmp_path):
    path = tmp_path / "big.prototxt"
    path.write_bytes(b"x" * 2048)
    small = SizeLimit(1024, "tests allow 1 KiB")
    with pytest.raises(CaffeError, match=r"big.prototxt': the file is 0.0 MiB; tests allow "
                                         "1 KiB"):
        read_input_bytes(path, "net file", small)
    assert read_input_bytes(path, "net file", SizeLimit(2048, "")) == b"x" * 2048


def test_prototxt_limit_admits_large_generated_nets():
    assert PROTOTXT_LIMIT.size >= 100 * 2**20 and "128 MiB" in PROTOTXT_LIMIT.rule


def test_impossible_paths():
    assert "NUL byte" in path_problem("a\0b")
    assert "PATH_MAX" in path_problem("d/" * 2100)
    assert "NAME_MAX" in path_problem("/tmp/" + "n" * 256)
    assert path_problem("/tmp/" + "n" * 255) is None
    assert path_problem("") is None
    assert "NUL byte" in file_problem("a\0b") and "NUL byte" in dir_problem("a\0b")


def test_dir_problem():
    assert dir_problem("/") is None
    assert dir_problem("/dev/null") == "Is a character device, not a folder"


def test_shown_paths_stay_one_readable_line():
    assert shown("plain/path.txt") == "plain/path.txt"
    assert shown("a\0b\nc") == "a\\x00b\\nc"
    long = shown("x" * 5000)
    assert len(long) < 150 and long.endswith("(5000 characters)")


NET_WITH_NUL = """
name: "n"
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 1 } } }
layer { name: "data" type: "HDF5Data" top: "x" hdf5_data_param { source: "a\\000b" } }
"""


def test_net_file_fields_are_checked_with_the_layer_and_line(tmp_path):
    path = tmp_path / "n.prototxt"
    path.write_text(NET_WITH_NUL)
    with pytest.raises(CaffeError) as caught:
        Net.from_file(str(path), caffe_pb2.TEST)
    assert str(caught.value) == (f"{path}:4: layer \"data\": hdf5_data_param.source 'a\\x00b': "
                                 "the path contains a NUL byte, which no file name can hold")


def test_solver_file_fields_are_checked(tmp_path):
    path = tmp_path / "s.prototxt"
    path.write_text(f'net: "n.prototxt"\nweights: "a.caffemodel,{"w" * 300}"\n')
    with pytest.raises(CaffeError, match=rf"^{path}: weights 'w+\.\.\.w+ \(300 characters\)': "
                                         "a file name in the path is 300 bytes long"):
        read_solver_param(str(path))


def test_path_values_walks_nested_nets_and_lists():
    solver = text_format.Parse("""
        snapshot_prefix: "snap/x" test_net: "t1" test_net: "t2" weights: "a, b"
        net_param { layer { name: "d" type: "Data" data_param { source: "db" }
                            transform_param { mean_file: "m" } } }
    """, caffe_pb2.SolverParameter())
    assert set(path_values(solver)) == {
        (None, "snapshot_prefix", "snap/x"), (None, "test_net", "t1"),
        (None, "test_net", "t2"), (None, "weights", "a"), (None, "weights", "b"),
        ("d", "data_param.source", "db"), ("d", "transform_param.mean_file", "m")}
    check_path_fields(solver)  # all possible: no error


def test_a_file_that_grows_while_read_is_read_to_its_end(tmp_path, monkeypatch):
    # The first read asks for the size the file had when opened (here the checks see 100
    # bytes); what it has grown by then is read on, up to the limit.
    path = tmp_path / "growing.png"
    path.write_bytes(bytes(range(256)) * 8)
    real_stat, real_fstat = os.stat, os.fstat

    def shrunk(info):
        return os.stat_result(tuple(info)[:6] + (100,) + tuple(info)[7:])
    monkeypatch.setattr(os, "fstat", lambda fd: shrunk(real_fstat(fd)))
    monkeypatch.setattr(os, "stat", lambda name, **options: shrunk(real_stat(name, **options)))
    assert read_input_bytes(path, "image file", SizeLimit(4096, "")) == bytes(range(256)) * 8
    with pytest.raises(CaffeError, match="grew past 0.0 MiB while it was read"):
        read_input_bytes(path, "image file", SizeLimit(2047, ""))
