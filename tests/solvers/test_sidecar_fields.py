"""Damaged resume sidecars through ``pycaffe train --snapshot``: every field
is checked against the net being resumed, and each damage is one line naming the sidecar and
the field's path, with exit status 1 and nothing restored."""
import json
import shutil

import h5py
import lmdb
import numpy as np
import pytest

from pycaffe_cli.state_fields import StateFieldError
from pycaffe_cli.proto import caffe_pb2
from tests.cli.conftest import interactive_sigint, run_cli  # noqa: F401 (fixtures)
from tests.layer_helpers import set_up
from tests.layers.test_image_data import image_data, listed  # noqa: F401 (a fixture)
from tests.layers.test_memory_data import examples, memory_data

# TRAIN: HDF5Data "data" (shuffled, 10 rows) and Data "db" (LMDB, mirrored: a generator);
# TEST: HDF5Data "data" (6 rows). Relative paths: each test trains in a folder of its own.
NET = """name: "fields"
layer { name: "data" type: "HDF5Data" top: "x" top: "y" include { phase: TRAIN }
        hdf5_data_param { source: "train.txt" batch_size: 3 shuffle: true } }
layer { name: "data" type: "HDF5Data" top: "x" top: "y" include { phase: TEST }
        hdf5_data_param { source: "test.txt" batch_size: 2 } }
layer { name: "db" type: "Data" top: "d" top: "l" include { phase: TRAIN }
        transform_param { mirror: true } data_param { source: "db" batch_size: 2 backend: LMDB } }
layer { name: "sink" type: "Silence" bottom: "d" bottom: "l" include { phase: TRAIN } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z" inner_product_param { num_output: 3 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "z" bottom: "y" top: "loss" }
"""
SOLVER = ('net: "net.prototxt"\nbase_lr: 0.1\nlr_policy: "fixed"\nmax_iter: 2\nsnapshot: 2\n'
          'snapshot_prefix: "m"\ntest_iter: 1\ntest_interval: 2\nrandom_seed: 1\ndisplay: 0\n')
SIDECAR = "m_iter_2.solverstate.pycaffe.json"
HUGE = "9" * 100000


def _write_inputs(folder):
    rng = np.random.default_rng(0)
    for name, rows in (("a.h5", 10), ("t.h5", 6)):
        with h5py.File(folder / name, "w") as h5:
            h5["x"] = rng.normal(size=(rows, 4)).astype(np.float32)
            h5["y"] = (np.arange(rows) % 3).astype(np.float32)
    (folder / "train.txt").write_text("a.h5\n")
    (folder / "test.txt").write_text("t.h5\n")
    env = lmdb.open(str(folder / "db"), map_size=1 << 20)
    with env.begin(write=True) as txn:
        for i in range(5):
            datum = caffe_pb2.Datum(channels=1, height=2, width=2, data=bytes([i] * 4), label=i)
            txn.put(f"{i:08d}".encode(), datum.SerializeToString())
    env.close()
    (folder / "net.prototxt").write_text(NET)
    (folder / "solver.prototxt").write_text(SOLVER)


_TRAINED = {}


@pytest.fixture
def snapshot(run_cli, tmp_path_factory, tmp_path, monkeypatch):
    """A copy of a trained folder (trained once per process) as the working directory."""
    if "folder" not in _TRAINED:
        folder = tmp_path_factory.mktemp("trained")
        _write_inputs(folder)
        with monkeypatch.context() as patch:
            patch.chdir(folder)
            result = run_cli("train", "--solver", "solver.prototxt")
        assert result.code == 0, result.err[-3000:]
        _TRAINED["folder"] = folder
    shutil.copytree(_TRAINED["folder"], tmp_path / "run")
    monkeypatch.chdir(tmp_path / "run")
    return json.loads((tmp_path / "run" / SIDECAR).read_text())


def _set(path, value):
    """A change that puts ``value`` at ``path`` (keys and indices) in the payload."""
    def change(payload):
        *parents, last = path
        for key in parents:
            payload = payload[key]
        payload[last] = value
    return change


def _delete(path):
    def change(payload):
        *parents, last = path
        for key in parents:
            payload = payload[key]
        del payload[last]
    return change


ROW = ("train", "data", "row")
PERMUTATION = ("train", "data", "data_permutation")
IN_FILE = " (the rows of 'a.h5')"
# (id, change, raw JSON for the marker "@@" or None, field path, message)
CASES = [
    ("row-float", _set(ROW, 3.5), None, 'train["data"].row',
     "must be an integer, found a number (3.5)"),
    ("row-bool", _set(ROW, True), None, 'train["data"].row',
     "must be an integer, found a boolean (true)"),
    ("row-1e999", _set(ROW, "@@"), "1e999", 'train["data"].row', "inf is not a finite number"),
    ("row-nan", _set(ROW, "@@"), "NaN", 'train["data"].row', "nan is not a finite number"),
    ("row-huge", _set(ROW, "@@"), HUGE, 'train["data"].row',
     "a number of 100000 digits is out of range"),
    ("row-past-end", _set(ROW, 10), None, 'train["data"].row',
     f"must be between 0 and 9{IN_FILE}, found 10"),
    ("row-negative", _set(ROW, -1), None, 'train["data"].row',
     f"must be between 0 and 9{IN_FILE}, found -1"),
    ("row-missing", _delete(ROW), None, 'train["data"].row', "missing"),
    ("row-string", _set(ROW, "3"), None, 'train["data"].row',
     "must be an integer, found a string ('3')"),
    ("permutation-all-minus-1", _set(PERMUTATION, [-1] * 10), None,
     'train["data"].data_permutation[0]', f"must be between 0 and 9{IN_FILE}, found -1"),
    ("permutation-all-0", _set(PERMUTATION, [0] * 10), None,
     'train["data"].data_permutation[1]', "0 appears twice: not a permutation of 0..9"),
    ("permutation-floats", _set(PERMUTATION, [float(i) for i in range(10)]), None,
     'train["data"].data_permutation[0]', "must be an integer, found a number (0.0)"),
    ("permutation-1e9", _set(PERMUTATION, [10 ** 9] * 10), None,
     'train["data"].data_permutation[0]', f"must be between 0 and 9{IN_FILE}, found 1000000000"),
    ("permutation-short", _set(PERMUTATION, [0, 1]), None, 'train["data"].data_permutation',
     "must be an array of the 10 indices 0..9 (the rows of 'a.h5'), found an array of 2"),
    ("permutation-bools", _set(PERMUTATION, [True] + list(range(1, 10))), None,
     'train["data"].data_permutation[0]', "must be an integer, found a boolean (true)"),
    ("file-permutation", _set(("train", "data", "file_permutation"), [1]), None,
     'train["data"].file_permutation[0]',
     "must be between 0 and 0 (the files listed in 'train.txt'), found 1"),
    ("file-index", _set(("train", "data", "file"), 1), None, 'train["data"].file',
     "must be between 0 and 0 (the files listed in 'train.txt'), found 1"),
    ("unexpected-field", _set(("train", "data", "cursor"), 0), None, 'train["data"].cursor',
     "unexpected: not a field of this state"),
    ("layer-not-in-net", _set(("train", "nope"), {"row": 0}), None, 'train["nope"]',
     'net "fields" has no layer of this name: the resume state was saved for another net'),
    ("layer-entry-missing", _delete(("train", "db")), None, 'train["db"]',
     'missing: layer "db" of net "fields" keeps a state'),
    ("state-not-an-object", _set(("train", "data"), [1, 2]), None, 'train["data"]',
     "must be an object, found an array"),
    ("three-test-entries", lambda p: p["test"].extend([{}, {}]), None, "test",
     "holds 3 test net state(s); this solver has 1 test net(s)"),
    ("no-test-entry", _set(("test",), []), None, "test",
     "holds 0 test net state(s); this solver has 1 test net(s)"),
    ("test-row", _set(("test", 0, "data", "row"), 6), None, 'test[0]["data"].row',
     "must be between 0 and 5 (the rows of 't.h5'), found 6"),
    ("key-not-hex", _set(("train", "db", "key"), "zz"), None, 'train["db"].key',
     "must be a string of hex digits (bytes), found a string ('zz')"),
    ("key-not-in-db", _set(("train", "db", "key"), "ff"), None, 'train["db"]',
     "layer \"db\": saved data position: database 'db' has no record b'\\xff'"),
    ("layer-rng-null", _set(("train", "db", "rng"), None), None, 'train["db"].rng',
     "must be an object, found null"),
    ("layer-rng-float", _set(("train", "db", "rng", "state", "inc"), 2.5), None,
     'train["db"].rng.state.inc', "must be an integer, found a number (2.5)"),
    ("rng-huge", _set(("rng", "state", "state"), "@@"), HUGE, "rng.state.state",
     "must be an integer, found a number of 100000 digits"),
    ("rng-bool", _set(("rng", "has_uint32"), True), None, "rng.has_uint32",
     "must be an integer, found a boolean (true)"),
    ("run-id", _set(("run_id",), 7), None, "run_id",
     "must be 32 lowercase hex digits, found a number (7)"),
    ("weights-hash-missing", _delete(("weights_sha256",)), None, "weights_sha256", "missing"),
    ("state-hash-short", _set(("state_sha256",), "ab"), None, "state_sha256",
     "must be 64 lowercase hex digits, found a string ('ab')"),
    ("solver-count-bool", _set(("solver_count",), True), None, "solver_count",
     "must be a positive integer, found a boolean (true)"),
    ("format-nan", _set(("format",), "@@"), "NaN", "format",
     "unknown resume-state format a number (nan)"),
]


@pytest.mark.parametrize("change, raw, field, message",
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_damaged_sidecar_field_is_one_line_naming_it(run_cli, snapshot, change, raw, field,
                                                     message):
    change(snapshot)
    text = json.dumps(snapshot)
    if raw is not None:
        text = text.replace('"@@"', raw)
    with open(SIDECAR, "w") as stream:
        stream.write(text)
    result = run_cli("train", "--solver", "solver.prototxt", "--snapshot",
                     "m_iter_2.solverstate")
    lines = result.error_lines()
    assert result.code == 1 and len(lines) == 1, result.err[-3000:]
    assert "Traceback" not in result.err and "Restored" not in result.err
    assert lines[0].startswith(f'pycaffe: error: {SIDECAR}: field "{field}": {message}'), (
        lines[0])


def test_the_undamaged_sidecar_resumes(run_cli, snapshot):
    result = run_cli("train", "--solver", "solver.prototxt", "--snapshot",
                     "m_iter_2.solverstate")
    assert result.code == 0, result.err[-3000:]
    assert f"Restored random generator and data layer states from {SIDECAR}" in result.messages


# --- the layers' own checks, for layers the command line cannot resume here ----------------
def _refused_state(layer, state):
    with pytest.raises(StateFieldError) as caught:
        layer.set_state(state)
    return caught.value.field, str(caught.value)


def test_memory_data_position_is_checked():
    layer, bottom, top = set_up(memory_data(batch=2), [], 2)
    layer.reset(*examples(4))
    for state, field, message in [
            ({"pos": 4}, "pos", "must be between 0 and 3 (the examples handed in), found 4"),
            ({"pos": 1}, "pos", "must be a multiple of the batch size (2), found 1"),
            ({"pos": True}, "pos", "must be an integer, found a boolean (true)"),
            ({}, "pos", "missing"), ([2], "", "must be an object, found an array")]:
        assert _refused_state(layer, state) == (field, message)
    layer.set_state({"pos": 2})
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[1].data, [12, 13])


def test_image_data_position_is_checked(listed):
    folder, _ = listed
    layer, bottom, top = image_data(folder, param="shuffle: true")
    good = json.loads(json.dumps(layer.get_state()))
    for change, field, message in [
            ({"index": 5}, "index", "must be between 0 and 4 (the images in the list), found 5"),
            ({"images": 6}, "images", "saved for a list of 6 images; this layer's list has 5"),
            ({"pass_rng": None}, "pass_rng", "must be an object, found null"),
            ({"rng": {"bit_generator": "PCG64"}}, "rng", "must be null (this layer draws no "
                                                         "random numbers here), found an object")]:
        assert _refused_state(layer, {**good, **change}) == (field, message)
    layer.set_state(good)
    layer.forward(bottom, top)
