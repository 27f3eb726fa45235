"""Every writer refuses to replace what is not a regular file.

A named pipe, a character device (a link to /dev/null: a bug would replace the link, never
the device), a socket or a folder at an output's path is refused with one line naming the
path, before anything is written: the special file is still there and no temporary file
is left. A link to a regular file is replaced (the link, not its target).
"""
import os
import socket
import stat

import h5py
import lmdb
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.files import atomic_output_path, atomic_write, check_output_target
from pycaffe_cli.io.hdf5_image import write_hdf5_atomically
from pycaffe_cli.io.prototxt import write_blob_proto
from pycaffe_cli.proto import caffe_pb2
from tests.cli.conftest import interactive_sigint, run_cli  # noqa: F401 (fixtures)
from tests.layer_helpers import set_up

KINDS = {"fifo": "Is a named pipe (FIFO), not a regular file",
         "device": "Is a character device, not a regular file",
         "socket": "Is a socket, not a regular file",
         "folder": "Is a directory, not a regular file"}
NET = """name: "tiny"
layer { name: "data" type: "DummyData" top: "x" top: "y"
        dummy_data_param { shape { dim: 2 dim: 3 } shape { dim: 2 }
                           data_filler { type: "gaussian" }
                           data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "z" bottom: "y" top: "loss" }
"""


def make_special(kind, path):
    """Put a ``kind`` (a key of KINDS) at ``path``."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        os.symlink("/dev/null", path)
    elif kind == "folder":
        os.mkdir(path)
    else:
        here = os.getcwd()
        os.chdir(os.path.dirname(path))     # AF_UNIX names are short: bind a relative one
        try:
            with socket.socket(socket.AF_UNIX) as server:
                server.bind(os.path.basename(path))
        finally:
            os.chdir(here)


def folder_state(folder):
    """Every name in ``folder`` with its lstat type and target: what must not change."""
    state = {}
    for name in os.listdir(folder):
        info = os.lstat(os.path.join(folder, name))
        target = os.readlink(os.path.join(folder, name)) if stat.S_ISLNK(info.st_mode) else None
        state[name] = (stat.S_IFMT(info.st_mode), target)
    return state


# --- the helpers every writer is built on ------------------------------------------------
def _write_stream(path):
    with atomic_write(path) as stream:
        stream.write(b"new")


def _write_named(path):
    with atomic_output_path(path) as temporary:
        with open(temporary, "wb") as stream:
            stream.write(b"new")


def _write_hdf5(path):
    write_hdf5_atomically(path, lambda h5: h5.create_dataset("a", data=np.zeros(3)))


def _write_mean(path):
    write_blob_proto(path, caffe_pb2.BlobProto(data=[1.0], shape=caffe_pb2.BlobShape(dim=[1])))


def _hdf5_output_layer(path):
    set_up(f'name: "out" type: "HDF5Output" bottom: "d" bottom: "l" '
           f'hdf5_output_param {{ file_name: "{path}" }}', [np.ones((2, 1)), np.ones(2)], 0)


def _net_save(path):
    import caffe
    caffe.Net(_tiny_net(os.path.dirname(path)), caffe.TEST).save(path)


def _net_save_hdf5(path):
    import caffe
    caffe.Net(_tiny_net(os.path.dirname(path)), caffe.TEST).save_hdf5(path)


def _tiny_net(folder):
    path = os.path.join(folder, "..", "tiny.prototxt")
    with open(path, "w") as stream:
        stream.write(NET)
    return path


WRITERS = {"atomic_write": _write_stream, "atomic_output_path": _write_named,
           "hdf5": _write_hdf5, "blob_proto": _write_mean, "HDF5Output": _hdf5_output_layer,
           "net.save": _net_save, "net.save_hdf5": _net_save_hdf5}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("writer", WRITERS)
def test_writers_refuse_a_special_file_and_write_nothing(tmp_path, writer, kind):
    folder = tmp_path / "out"
    folder.mkdir()
    target = str(folder / "target")
    make_special(kind, target)
    before = folder_state(folder)
    with pytest.raises(CaffeError) as caught:
        WRITERS[writer](target)
    message = str(caught.value)
    assert f"cannot write '{target}': {KINDS[kind]}" in message
    assert "\n" not in message
    assert folder_state(folder) == before


@pytest.mark.parametrize("writer", ["atomic_write", "hdf5", "HDF5Output", "net.save"])
def test_a_link_to_a_regular_file_is_replaced_not_its_target(tmp_path, writer):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    (tmp_path / "out").mkdir()
    link = tmp_path / "out" / "target"
    link.symlink_to(victim)
    WRITERS[writer](str(link))
    assert victim.read_bytes() == b"keep me"
    assert not link.is_symlink() and link.stat().st_size > 0


def test_a_dangling_link_and_a_missing_file_may_be_written(tmp_path):
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for name in ("dangling", "new"):
        check_output_target(str(tmp_path / name))
        _write_stream(str(tmp_path / name))
        assert (tmp_path / name).read_bytes() == b"new"
    assert not (tmp_path / "nowhere").exists()


def test_a_nul_byte_in_the_path_is_one_error(tmp_path):
    with pytest.raises(CaffeError, match="cannot write .*NUL byte"):
        _write_stream(str(tmp_path / "a\0b"))


# --- through the command line ------------------------------------------------------------
def one_error(result):
    lines = result.error_lines()
    assert result.code == 1 and len(lines) == 1, result.err[-2000:]
    assert "Traceback" not in result.err
    return lines[0]


def write_lmdb(path):
    env = lmdb.open(str(path), map_size=1 << 20)
    with env.begin(write=True) as txn:
        for i in range(3):
            datum = caffe_pb2.Datum(channels=1, height=2, width=2, data=bytes([i] * 4), label=i)
            txn.put(f"{i:08d}".encode(), datum.SerializeToString())
    env.close()
    return str(path)


@pytest.mark.parametrize("kind", KINDS)
def test_compute_image_mean_refuses_a_special_output(run_cli, tmp_path, kind):
    database = write_lmdb(tmp_path / "db")
    folder = tmp_path / "out"
    folder.mkdir()
    target = str(folder / "mean.binaryproto")
    make_special(kind, target)
    before = folder_state(folder)
    line = one_error(run_cli("compute_image_mean", database, target))
    assert line == f"pycaffe: error: cannot write '{target}': {KINDS[kind]}"
    assert folder_state(folder) == before


@pytest.mark.parametrize("kind", KINDS)
def test_upgrade_refuses_a_special_output(run_cli, tmp_path, kind):
    source = tmp_path / "old.prototxt"
    source.write_text(NET)
    folder = tmp_path / "out"
    folder.mkdir()
    target = str(folder / "new.prototxt")
    make_special(kind, target)
    before = folder_state(folder)
    line = one_error(run_cli("upgrade_net_proto_text", source, target))
    assert line == f"pycaffe: error: cannot write '{target}': {KINDS[kind]}"
    assert folder_state(folder) == before


def train_folder(tmp_path, fmt="BINARYPROTO"):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "net.prototxt").write_text(NET)
    solver = folder / "solver.prototxt"
    solver.write_text(f'net: "{folder / "net.prototxt"}"\nbase_lr: 0.1\nlr_policy: "fixed"\n'
                      f'max_iter: 2\nsnapshot: 2\nsnapshot_prefix: "{folder / "s"}"\n'
                      f'snapshot_format: {fmt}\ndisplay: 0\n')
    return folder, str(solver)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fmt, name", [
    ("BINARYPROTO", "s_iter_2.caffemodel"), ("BINARYPROTO", "s_iter_2.solverstate"),
    ("BINARYPROTO", "s_iter_2.solverstate.pycaffe.json"), ("HDF5", "s_iter_2.caffemodel.h5"),
    ("HDF5", "s_iter_2.solverstate.h5")])
def test_a_snapshot_is_not_written_over_a_special_file(run_cli, tmp_path, kind, fmt, name):
    """All three targets are checked before the first is written: no half unit."""
    folder, solver = train_folder(tmp_path, fmt)
    target = str(folder / name)
    make_special(kind, target)
    before = folder_state(folder)
    line = one_error(run_cli("train", "--solver", solver))
    assert line == (f"pycaffe: error: cannot write '{target}': {KINDS[kind]} (the snapshot of "
                    "iteration 2 is not written; earlier snapshots are kept)")
    assert folder_state(folder) == before


def test_the_write_permission_probe_never_opens_an_existing_file(run_cli, tmp_path):
    """Caffe's probe opens <prefix>_iter_0.tempfile for writing: a pipe there would hang it,
    a link there be followed and truncated. pycaffe probes with a new file of a unique name."""
    folder, solver = train_folder(tmp_path)
    os.mkfifo(folder / "s_iter_0.tempfile")
    result = run_cli("train", "--solver", solver)
    assert result.code == 0, result.err[-2000:]
    assert stat.S_ISFIFO(os.lstat(folder / "s_iter_0.tempfile").st_mode)
    assert not any(name.endswith(".tempfile") and name != "s_iter_0.tempfile"
                   for name in os.listdir(folder))


def test_hdf5_output_file_is_still_appended_batch_by_batch(tmp_path):
    path = tmp_path / "o.h5"
    layer, bottom, top = set_up(f'name: "out" type: "HDF5Output" bottom: "d" bottom: "l" '
                                f'hdf5_output_param {{ file_name: "{path}" }}',
                                [np.ones((2, 1)), np.ones(2)], 0)
    layer.forward(bottom, top)
    layer.forward(bottom, top)
    with h5py.File(path, "r") as h5:
        assert h5["data"].shape == (4, 1, 1, 1)
    layer.close()
    assert os.listdir(tmp_path) == ["o.h5"]
