"""Durable snapshots: a full disk, one unit per snapshot, checked resume files."""
import errno
import json
import os
import random
import tempfile

import h5py
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io import files
from pycaffe_cli.io.files import atomic_write
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.solvers import create_solver
from pycaffe_cli.solvers.state import read_solver_state
from tests.solvers.helpers import LogCapture
from tests.solvers.test_snapshots import dot_solver, resume_param


def no_space(*args, **kwargs):
    """Stands in for a write call on a full disk."""
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class FillingStream:
    """Wraps a stream whose disk fills up after ``room`` bytes."""

    def __init__(self, stream, room):
        self._stream, self._room = stream, room

    def write(self, data):
        if len(data) > self._room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._room -= len(data)
        return self._stream.write(data)

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._stream.close()


def disk_fills_after(monkeypatch, room):
    real_fdopen = os.fdopen
    monkeypatch.setattr(files.os, "fdopen",
                        lambda *a, **k: FillingStream(real_fdopen(*a, **k), room))


@pytest.mark.parametrize("where", ["write", "fsync"])
def test_full_disk_keeps_the_old_file_and_removes_the_temporary(tmp_path, monkeypatch, where):
    target = tmp_path / "model.caffemodel"
    target.write_bytes(b"old")
    if where == "write":
        disk_fills_after(monkeypatch, 2)
    else:
        monkeypatch.setattr(files.os, "fsync", no_space)
    with pytest.raises(CaffeError) as caught:
        with atomic_write(str(target)) as stream:
            stream.write(b"new contents")
    assert str(caught.value) == f"cannot write '{target}': No space left on device"
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["model.caffemodel"]


def test_unwritable_folder_names_the_file(tmp_path, monkeypatch):
    def refused(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
    monkeypatch.setattr(tempfile, "mkstemp", refused)
    with pytest.raises(CaffeError, match=f"cannot write '{tmp_path}/a.bin': Permission denied"):
        with atomic_write(str(tmp_path / "a.bin")) as stream:
            stream.write(b"x")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders; "
                    "the monkeypatched variant above runs instead")
def test_read_only_folder_for_real(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(CaffeError, match="Permission denied"):
            with atomic_write(str(folder / "a.bin")) as stream:
                stream.write(b"x")
    finally:
        folder.chmod(0o755)


def test_hdf5_weights_on_a_full_disk_are_one_error_and_no_crash(tmp_path, monkeypatch):
    """HDF5 files are built in memory: the HDF5 library never meets the full disk (it used
    to print ignored exceptions, leave its temporary file and crash)."""
    from pycaffe_cli.io.weights import write_hdf5_weights
    target = tmp_path / "w.caffemodel.h5"
    disk_fills_after(monkeypatch, 100)
    with pytest.raises(CaffeError, match=f"cannot write '{target}': No space left on device"):
        write_hdf5_weights(str(target), [("ip", [(np.ones((30, 30)), None, True)])])
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("fmt, failing", [("BINARYPROTO", ".solverstate"),
                                          ("BINARYPROTO", ".caffemodel"),
                                          ("HDF5", ".solverstate.h5"),
                                          ("HDF5", ".caffemodel.h5")])
def test_full_disk_during_training_keeps_earlier_snapshots(tmp_path, monkeypatch, fmt, failing):
    solver = dot_solver(tmp_path, f"snapshot: 1 max_iter: 3 snapshot_format: {fmt}")
    real = files._commit

    def commit(temp_path, path):
        if path.endswith("_iter_2" + failing):
            raise files._cannot_write(path, OSError(errno.ENOSPC, "No space left on device"))
        real(temp_path, path)
    monkeypatch.setattr(files, "_commit", commit)
    with pytest.raises(CaffeError) as caught:
        solver.solve()
    name = tmp_path / f"snap_iter_2{failing}"
    assert str(caught.value) == (f"cannot write '{name}': No space left on device (the snapshot "
                                 "of iteration 2 is not written; earlier snapshots are kept)")
    state = ".solverstate.h5" if fmt == "HDF5" else ".solverstate"
    model = ".caffemodel.h5" if fmt == "HDF5" else ".caffemodel"
    names = sorted(os.listdir(tmp_path))
    assert [n for n in names if "_iter_1" in n] == sorted([
        f"snap_iter_1{model}", f"snap_iter_1{state}", f"snap_iter_1{state}.pycaffe.json"])
    assert [n for n in names if "_iter_2" in n] == (
        [f"snap_iter_2{model}"] if failing == state else [])
    assert read_solver_state(str(tmp_path / f"snap_iter_1{state}")).iter == 1


# --- a snapshot is one unit ----------------------------------------------------------------
def test_the_state_file_is_renamed_into_place_last(tmp_path, monkeypatch):
    renamed = []
    real = os.replace

    def replace(src, dst):
        renamed.append(os.path.basename(dst))
        real(src, dst)
    monkeypatch.setattr(os, "replace", replace)
    dot_solver(tmp_path, "max_iter: 1").solve()
    assert renamed == ["snap_iter_1.caffemodel", "snap_iter_1.solverstate.pycaffe.json",
                       "snap_iter_1.solverstate"]


def test_missing_sidecar_is_a_warning(tmp_path):
    create_solver(resume_param(tmp_path, "SGD", "whole")).solve()
    state = str(tmp_path / "whole_iter_3.solverstate")
    os.remove(state + ".pycaffe.json")
    with LogCapture() as log:
        create_solver(resume_param(tmp_path, "SGD", "again")).restore(state)
    assert log.warnings() == [f"No {state}.pycaffe.json: resume will not be exact: data layers "
                              "restart from their beginning and the random generator is not "
                              "restored, as in Caffe"]


def test_a_sidecar_of_another_state_is_refused(tmp_path):
    create_solver(resume_param(tmp_path, "SGD", "whole")).solve()
    state = tmp_path / "whole_iter_3.solverstate"
    proto = caffe_pb2.SolverState.FromString(state.read_bytes())
    proto.history[0].data[0] += 1.0             # as if an older run's state were still here
    state.write_bytes(proto.SerializeToString())
    resumed = create_solver(resume_param(tmp_path, "SGD", "again"))
    with pytest.raises(CaffeError) as caught:
        resumed.restore(str(state))
    assert str(caught.value) == (
        f"{state}: cannot resume from this snapshot: the state file is not the one "
        f"{state}.pycaffe.json was written with (another SHA-256); its files belong to "
        "different runs, or to a snapshot that was interrupted while it replaced another: "
        "resume from an earlier snapshot")
    assert resumed.iter == 0 and resumed.net.layer_by_name("count").count == 0


# --- the sidecar is checked field by field ---------------------------------------------------
def _rng(payload):
    return payload["rng"]


SIDECAR_CASES = [
    ("not json {", None, "cannot read the resume state (Expecting value"),
    ("[]", None, "expected a JSON object, found an array"),
    ("null", None, "expected a JSON object, found null"),
    ("[" * 100000, None, "cannot read the resume state"),
    (None, lambda p: p.pop("rng"), 'field "rng": missing'),
    (None, lambda p: p.pop("train"), 'field "train": missing'),
    (None, lambda p: p.update(format=True),
     'field "format": unknown resume-state format a boolean (true)'),
    (None, lambda p: p.update(format=3), 'field "format": unknown resume-state format 3'),
    (None, lambda p: p.update(rng=None), 'field "rng": must be an object, found null'),
    (None, lambda p: _rng(p).update(bit_generator="MT19937"),
     "field \"rng.bit_generator\": must be 'PCG64', found a string ('MT19937')"),
    (None, lambda p: _rng(p)["state"].update(inc=1.5),
     'field "rng.state.inc": must be an integer, found a number'),
    (None, lambda p: _rng(p)["state"].update(state=-1),
     'field "rng.state.state": must be between 0 and'),
    (None, lambda p: _rng(p).update(has_uint32=7), 'field "rng.has_uint32": must be between 0 '
                                                   'and 1, found 7'),
    (None, lambda p: _rng(p)["state"].pop("inc"), 'field "rng.state.inc": missing'),
    (None, lambda p: p.update(train=[]), 'field "train": must be an object, found an array'),
    (None, lambda p: p.update(test={}), 'field "test": must be an array, found an object'),
    (None, lambda p: p["test"].__setitem__(0, 5), 'field "test[0]": must be an object'),
    (None, lambda p: p["train"].update(count={"cnt": 3}),
     "field \"train[\"count\"]\": not a saved state of this layer (KeyError: 'count')"),
    (None, lambda p: p.update(state_sha256="xyz"), 'field "state_sha256": must be 64 lowercase'),
    (None, lambda p: p.update(state_sha256=None), 'field "state_sha256": must be 64 lowercase'),
]


@pytest.mark.parametrize("text, change, message", SIDECAR_CASES)
def test_broken_sidecar_names_the_file_and_the_field(tmp_path, text, change, message):
    create_solver(resume_param(tmp_path, "SGD", "whole")).solve()
    state = str(tmp_path / "whole_iter_3.solverstate")
    sidecar = state + ".pycaffe.json"
    if change is not None:
        with open(sidecar) as stream:
            payload = json.load(stream)
        change(payload)
        text = json.dumps(payload)
    with open(sidecar, "w") as stream:
        stream.write(text)
    resumed = create_solver(resume_param(tmp_path, "SGD", "again"))
    with pytest.raises(CaffeError) as caught:
        resumed.restore(state)
    assert str(caught.value).startswith(f"{sidecar}: ")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_generator_states_inside_layer_states_are_checked(tmp_path):
    from pycaffe_cli.solvers.sidecar import check_sidecar
    payload = {"format": 1, "rng": np.random.default_rng(1).bit_generator.state,
               "train": {"data": {"key": "00", "rng": {
                   "bit_generator": "PCG64", "state": {"state": 1, "inc": "3"},
                   "has_uint32": 0, "uinteger": 0}}}, "test": []}
    with pytest.raises(CaffeError, match='field "train\\["data"\\].rng.state.inc": must be '
                                         'an integer, found a string'):
        check_sidecar(payload, "s.pycaffe.json")


# --- the solver state is checked field by field ------------------------------------------
def hdf5_state(tmp_path):
    solver = dot_solver(tmp_path, "snapshot_format: HDF5")
    solver.solve()
    return tmp_path / "snap_iter_2.solverstate.h5"


def _replace(h5, name, data):
    del h5[name]
    h5[name] = data


HDF5_CASES = [
    (lambda h5: _replace(h5, "iter", np.array([-3], np.int32)),
     'field "iter": must be between 0 and 2147483647, got -3'),
    (lambda h5: _replace(h5, "iter", np.array([2.0])), 'field "iter": must be an integer '
                                                       'dataset, got type float64'),
    (lambda h5: _replace(h5, "iter", np.array([1, 2], np.int32)),
     'field "iter": must hold one value, holds 2'),
    (lambda h5: h5.__delitem__("current_step"), 'field "current_step": missing'),
    (lambda h5: _replace(h5, "current_step", np.array([2 ** 40], np.int64)),
     'field "current_step": must be between 0 and 2147483647'),
    (lambda h5: _replace(h5, "learned_net", np.array([1.5])),
     'field "learned_net": must be a string, got float'),
    (lambda h5: _replace(h5, "learned_net", np.array(b"a\0b\0")),
     'field "learned_net": contains a NUL byte'),
    (lambda h5: h5.__delitem__("history"), 'field "history": missing'),
    (lambda h5: _replace(h5, "history", np.zeros(3)), 'field "history": must be a group'),
    (lambda h5: h5["history"].move("1", "x"), 'field "history/x": unexpected'),
    (lambda h5: _replace(h5, "history/0", np.array([b"abc"])),
     'field "history/0": must hold numbers'),
    (lambda h5: _replace(h5, "history/1", h5py.Empty("f")),
     'field "history/1": is an empty dataset'),
    (lambda h5: _replace(h5, "iter", h5py.Empty("i")), 'field "iter": is an empty dataset'),
    (lambda h5: h5["history"].create_dataset("2", shape=(2 ** 32,), dtype="f4"),
     'field "history/2": holds 4294967296 values, more than a Caffe blob can hold'),
    (lambda h5: _replace(h5, "history/1", np.zeros(7, np.float32)),
     "history blob 1 has 7 values, the param it belongs to has 1"),
]


@pytest.mark.parametrize("change, message", HDF5_CASES)
def test_broken_hdf5_state_names_the_file_and_the_field(tmp_path, change, message):
    state = hdf5_state(tmp_path)
    os.remove(f"{state}.pycaffe.json")    # its SHA-256 would refuse the edited state first
    with h5py.File(state, "a") as h5:
        change(h5)
    with pytest.raises(CaffeError) as caught:
        dot_solver(tmp_path, "snapshot_format: HDF5", prefix="other").restore(str(state))
    assert str(caught.value).startswith(f"{state}: ")
    assert message in str(caught.value)


def test_truncated_hdf5_state_is_one_line(tmp_path):
    state = hdf5_state(tmp_path)
    data = state.read_bytes()
    for size in (0, 8, 100, len(data) // 2, len(data) - 1):
        state.write_bytes(data[:size])
        with pytest.raises(CaffeError) as caught:
            read_solver_state(str(state))
        assert str(caught.value).startswith(f"{state}: cannot read HDF5 solver state")
        assert "\n" not in str(caught.value)


def test_truncated_or_corrupt_binary_state_is_one_line_or_a_valid_state(tmp_path):
    solver = dot_solver(tmp_path)
    solver.solve()
    state = tmp_path / "snap_iter_2.solverstate"
    data = state.read_bytes()
    rng = random.Random(11)
    damaged = [data[:size] for size in range(len(data))]
    for _ in range(300):
        flipped = bytearray(data)
        flipped[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        damaged.append(bytes(flipped))
    for blob in damaged:
        state.write_bytes(blob)
        try:
            read_solver_state(str(state))
        except CaffeError as error:
            assert str(error).startswith(f"{state}: ") and "\n" not in str(error)


@pytest.mark.parametrize("field, value, message", [
    ("iter", -1, 'field "iter": must be between 0 and 2147483647, got -1'),
    ("current_step", -5, 'field "current_step": must be between 0'),
    ("learned_net", "a\0b", 'field "learned_net": contains a NUL byte')])
def test_binary_state_fields_are_checked(tmp_path, field, value, message):
    state = tmp_path / "s.solverstate"
    state.write_bytes(caffe_pb2.SolverState(**{field: value}).SerializeToString())
    with pytest.raises(CaffeError, match=f"{state}: {message}"):
        read_solver_state(str(state))


def test_resume_files_that_are_pipes_are_refused_unopened(tmp_path):
    create_solver(resume_param(tmp_path, "SGD", "whole")).solve()
    state = str(tmp_path / "whole_iter_3.solverstate")
    os.remove(state + ".pycaffe.json")
    os.mkfifo(state + ".pycaffe.json")
    resumed = create_solver(resume_param(tmp_path, "SGD", "again"))
    with pytest.raises(CaffeError, match="cannot read resume state .*: Is a named pipe"):
        resumed.restore(state)
    os.mkfifo(tmp_path / "pipe.solverstate.h5")
    with pytest.raises(CaffeError, match="cannot read solver state .*: Is a named pipe"):
        read_solver_state(str(tmp_path / "pipe.solverstate.h5"))
