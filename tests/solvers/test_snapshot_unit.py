"""A snapshot is one unit across runs: two runs on one prefix, one of them killed
or stopped by a full disk while it replaces the other's snapshot, never leave a mix that
resumes. The sidecar binds the weights and state files by SHA-256 and names its run."""
import errno
import json
import os
import shutil

import pytest

from pycaffe_cli.io import files
from tests.cli.conftest import interactive_sigint, run_cli  # noqa: F401 (fixtures)

NET = """name: "unit"
layer { name: "data" type: "DummyData" top: "x" top: "y"
        dummy_data_param { shape { dim: 4 dim: 6 } shape { dim: 4 }
                           data_filler { type: "gaussian" std: 1 }
                           data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "z" bottom: "y" top: "loss" }
"""
FORMATS = {"BINARYPROTO": (".caffemodel", ".solverstate"),
           "HDF5": (".caffemodel.h5", ".solverstate.h5")}
REFUSAL = ("; its files belong to different runs, or to a snapshot that was interrupted while "
           "it replaced another: resume from an earlier snapshot")


class Unit:
    """The three files of snapshot ``iteration`` in ``folder`` (prefix "m")."""

    def __init__(self, folder, iteration, fmt):
        model, state = FORMATS[fmt]
        self.model = folder / f"m_iter_{iteration}{model}"
        self.state = folder / f"m_iter_{iteration}{state}"
        self.sidecar = folder / f"m_iter_{iteration}{state}.pycaffe.json"

    @property
    def paths(self):
        return [self.model, self.sidecar, self.state]

    def save(self):
        return {path: path.read_bytes() for path in self.paths}

    def run_id(self):
        return json.loads(self.sidecar.read_text())["run_id"]


def solver(folder, seed, fmt="BINARYPROTO", max_iter=2, snapshot=2):
    folder.mkdir(exist_ok=True)
    (folder / "net.prototxt").write_text(NET)
    path = folder / f"solver{seed}_{max_iter}.prototxt"
    path.write_text(f'net: "{folder / "net.prototxt"}"\nbase_lr: 0.1\nmomentum: 0.9\n'
                    f'lr_policy: "fixed"\nmax_iter: {max_iter}\nsnapshot: {snapshot}\n'
                    f'snapshot_prefix: "{folder / "m"}"\nsnapshot_format: {fmt}\n'
                    f"random_seed: {seed}\ndisplay: 0\n")
    return str(path)


def train(run_cli, *args):
    result = run_cli("train", "--solver", *args)
    assert result.code == 0, result.err[-3000:]
    return result


def refusal(run_cli, solver_path, state):
    result = run_cli("train", "--solver", solver_path, "--snapshot", state)
    lines = result.error_lines()
    assert result.code == 1 and len(lines) == 1, result.err[-3000:]
    assert "Traceback" not in result.err and "Restored" not in result.err
    return lines[0]


def overwrites(result):
    return [m for m in result.messages if m.startswith("Overwriting ")]


def two_runs(run_cli, tmp_path, fmt="BINARYPROTO"):
    """Run A (seed 1) then run B (seed 2) on the same prefix: A's and B's iteration-2 units."""
    folder = tmp_path / "run"
    unit = Unit(folder, 2, fmt)
    train(run_cli, solver(folder, 1, fmt))
    run_a, id_a = unit.save(), unit.run_id()
    result = train(run_cli, solver(folder, 2, fmt))
    assert overwrites(result) == [
        f"Overwriting {unit.model}, {unit.sidecar}, {unit.state}, written by another run (run "
        f"{id_a}); Caffe overwrites snapshots of the same name silently"]
    assert unit.run_id() != id_a
    return folder, unit, run_a, unit.save()


def put(files_by_path):
    for path, data in files_by_path.items():
        path.write_bytes(data)


@pytest.mark.parametrize("fmt", FORMATS)
def test_killed_after_the_other_runs_weights_is_refused(run_cli, tmp_path, fmt):
    """The case that matters: B killed right after renaming its weights over A's."""
    folder, unit, run_a, run_b = two_runs(run_cli, tmp_path, fmt)
    put(run_a)
    unit.model.write_bytes(run_b[unit.model])
    line = refusal(run_cli, solver(folder, 1, fmt), unit.state)
    assert line == (f"pycaffe: error: {unit.state}: cannot resume from this snapshot: its "
                    f"weights file {unit.model} is not the one {unit.sidecar} was written with "
                    f"(another SHA-256){REFUSAL}")
    put(run_a)                                    # A's own unit still resumes, exactly
    result = train(run_cli, solver(folder, 1, fmt), "--snapshot", unit.state)
    assert f"Restored random generator and data layer states from {unit.sidecar}" in (
        result.messages)


@pytest.mark.parametrize("fmt", FORMATS)
def test_killed_after_the_other_runs_sidecar_is_refused(run_cli, tmp_path, fmt):
    folder, unit, run_a, run_b = two_runs(run_cli, tmp_path, fmt)
    put(run_b)
    unit.state.write_bytes(run_a[unit.state])
    line = refusal(run_cli, solver(folder, 1, fmt), unit.state)
    assert line == (f"pycaffe: error: {unit.state}: cannot resume from this snapshot: the "
                    f"state file is not the one {unit.sidecar} was written with (another "
                    f"SHA-256){REFUSAL}")


def test_weights_and_sidecar_of_one_run_with_the_state_of_a_third_are_refused(run_cli,
                                                                              tmp_path):
    """A: whole unit; B killed after its sidecar; C killed after its weights: no two agree."""
    folder, unit, run_a, run_b = two_runs(run_cli, tmp_path)
    train(run_cli, solver(folder, 3))
    run_c = unit.save()
    put({unit.model: run_c[unit.model], unit.sidecar: run_b[unit.sidecar],
         unit.state: run_a[unit.state]})
    assert "the state file is not the one" in refusal(run_cli, solver(folder, 1), unit.state)


def test_missing_weights_are_refused(run_cli, tmp_path):
    folder = tmp_path / "run"
    unit = Unit(folder, 2, "BINARYPROTO")
    train(run_cli, solver(folder, 1))
    unit.model.unlink()
    line = refusal(run_cli, solver(folder, 1), unit.state)
    assert line == (f"pycaffe: error: {unit.state}: cannot resume from this snapshot: its "
                    f"weights file {unit.model} is missing{REFUSAL}")


def full_disk_at(monkeypatch, suffix):
    real = files._commit

    def commit(temp_path, path):
        if path.endswith(suffix):
            raise files._cannot_write(path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        real(temp_path, path)
    monkeypatch.setattr(files, "_commit", commit)


@pytest.mark.parametrize("failing, message", [
    (".solverstate.pycaffe.json", "its weights file"),
    (".solverstate", "the state file")])
def test_a_full_disk_while_replacing_another_runs_snapshot_leaves_no_resumable_mix(
        run_cli, tmp_path, monkeypatch, failing, message):
    folder = tmp_path / "run"
    unit = Unit(folder, 2, "BINARYPROTO")
    train(run_cli, solver(folder, 1))
    run_a = unit.save()
    with monkeypatch.context() as patch:
        full_disk_at(patch, "_iter_2" + failing)
        result = run_cli("train", "--solver", solver(folder, 2))
    assert result.code == 1 and "No space left on device" in result.error_lines()[0]
    assert unit.model.read_bytes() != run_a[unit.model]       # B's weights are in place
    assert unit.state.read_bytes() == run_a[unit.state]       # A's state is still there
    line = refusal(run_cli, solver(folder, 1), unit.state)
    assert f"cannot resume from this snapshot: {message}" in line
    assert not [name for name in os.listdir(folder) if name.endswith(".part")]


def test_a_resumed_run_keeps_its_id_and_overwrites_its_own_snapshots_silently(run_cli,
                                                                              tmp_path):
    folder = tmp_path / "run"
    train(run_cli, solver(folder, 1, max_iter=4))
    first, last = Unit(folder, 2, "BINARYPROTO"), Unit(folder, 4, "BINARYPROTO")
    run_id, old_last = first.run_id(), last.save()
    result = train(run_cli, solver(folder, 1, max_iter=4), "--snapshot", first.state)
    assert overwrites(result) == []
    assert last.run_id() == run_id
    assert last.save() == old_last                # and the resume was exact


def test_a_new_run_warns_once_per_snapshot_it_overwrites(run_cli, tmp_path):
    folder = tmp_path / "run"
    train(run_cli, solver(folder, 1, max_iter=4))
    result = train(run_cli, solver(folder, 2, max_iter=4))
    assert len(overwrites(result)) == 2
    assert [m for m in result.messages if m.startswith("Overwriting ")
            and "m_iter_4.caffemodel" in m]


def test_caffe_snapshots_without_a_sidecar_resume_and_are_overwritten_with_a_warning(
        run_cli, tmp_path):
    folder = tmp_path / "run"
    unit = Unit(folder, 2, "BINARYPROTO")
    train(run_cli, solver(folder, 1))
    unit.sidecar.unlink()                         # as Caffe writes a snapshot
    result = train(run_cli, solver(folder, 1), "--snapshot", unit.state)
    assert [m for m in result.messages if m.startswith("No ")] == [
        f"No {unit.sidecar}: resume will not be exact: data layers restart from their "
        "beginning and the random generator is not restored, as in Caffe"]
    result = train(run_cli, solver(folder, 2))
    assert overwrites(result) == [
        f"Overwriting {unit.model}, {unit.state}, written by another run (a run that left no "
        "resume sidecar: Caffe, or an interrupted run); Caffe overwrites snapshots of the same "
        "name silently"]


def test_the_sidecar_binds_the_files_as_written(run_cli, tmp_path):
    import hashlib
    folder = tmp_path / "run"
    unit = Unit(folder, 2, "BINARYPROTO")
    train(run_cli, solver(folder, 1))
    payload = json.loads(unit.sidecar.read_text())
    assert payload["format"] == 2 and len(payload["run_id"]) == 32
    assert payload["weights_sha256"] == hashlib.sha256(unit.model.read_bytes()).hexdigest()
    assert payload["state_sha256"] == hashlib.sha256(unit.state.read_bytes()).hexdigest()


def test_an_earlier_pycaffes_sidecar_is_ignored_with_a_warning(run_cli, tmp_path):
    folder = tmp_path / "run"
    unit = Unit(folder, 2, "BINARYPROTO")
    train(run_cli, solver(folder, 1))
    payload = json.loads(unit.sidecar.read_text())
    for key in ("run_id", "weights_sha256"):
        del payload[key]
    payload["format"] = 1
    unit.sidecar.write_text(json.dumps(payload))
    result = train(run_cli, solver(folder, 1), "--snapshot", unit.state)
    assert f"{unit.sidecar} was written by an earlier pycaffe, which did not record the " \
           "weights' SHA-256, and is ignored: resume will not be exact: data layers restart " \
           "from their beginning and the random generator is not restored, as in Caffe" in (
               result.messages)


def test_a_snapshot_moved_to_another_folder_still_resumes(run_cli, tmp_path):
    folder = tmp_path / "run"
    unit = Unit(folder, 2, "BINARYPROTO")
    train(run_cli, solver(folder, 1))
    moved = tmp_path / "moved"
    shutil.copytree(folder, moved)
    shutil.rmtree(folder)
    result = train(run_cli, solver(moved, 1), "--snapshot", moved / unit.state.name)
    assert any(m.startswith("Restored random generator") for m in result.messages)


def test_a_pipe_in_place_of_the_weights_is_refused_unopened(run_cli, tmp_path):
    folder = tmp_path / "run"
    unit = Unit(folder, 2, "BINARYPROTO")
    train(run_cli, solver(folder, 1))
    unit.model.unlink()
    os.mkfifo(unit.model)
    line = refusal(run_cli, solver(folder, 1), unit.state)
    assert line == (f"pycaffe: error: cannot read weights file '{unit.model}': Is a named pipe "
                    "(FIFO), not a regular file")
