"""A seeded corpus of damaged inputs of every kind of file pycaffe reads, run through the
command line in-process: net and solver prototxts, weights (.caffemodel, .caffemodel.h5),
solver states (binary and HDF5), resume sidecars, mean files, LMDB and HDF5 data, image
lists and images. Each damaged file replaces one good file of a working run; the run must
end with status 0 (the damage went unnoticed or did not matter), or 1 with exactly one
``pycaffe: error:`` line, and never with an exception out of ``main`` (a traceback), a hang
(SIGALRM) or a crash (which ends the test process).
"""
import contextlib
import os
import random
import re
import shutil
import signal

import h5py
import numpy as np
import pytest
from PIL import Image

from pycaffe_cli.data.image_datum import DatumWriter
from pycaffe_cli.io.blob_proto import fill_blob_proto
from pycaffe_cli.io.prototxt import write_blob_proto
from pycaffe_cli.proto import caffe_pb2
from tests.cli.conftest import run_in_process

CASES_PER_KIND = 36
SECONDS_PER_RUN = 60
pytestmark = pytest.mark.slow

BODY = """
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 2 kernel_size: 3 weight_filler { type: "xavier" } } }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip"
        inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""
SOURCES = {
    "dummy": 'layer { name: "data" type: "DummyData" top: "data" top: "label" '
             "dummy_data_param { shape { dim: 2 dim: 1 dim: 8 dim: 8 } shape { dim: 2 } "
             'data_filler { type: "gaussian" } data_filler { type: "constant" value: 1 } } }',
    "lmdb": 'layer { name: "data" type: "Data" top: "data" top: "label" '
            'transform_param { mean_file: "mean.binaryproto" } '
            'data_param { source: "lmdb" batch_size: 2 backend: LMDB } }',
    "hdf5": 'layer { name: "data" type: "HDF5Data" top: "data" top: "label" '
            'hdf5_data_param { source: "h5.txt" batch_size: 2 } }',
    "images": 'layer { name: "data" type: "ImageData" top: "data" top: "label" '
              'image_data_param { source: "list.txt" batch_size: 2 is_color: false '
              "new_height: 8 new_width: 8 } }",
}
SOLVER = """net: "dummy.prototxt"
base_lr: 0.01 momentum: 0.9 lr_policy: "step" gamma: 0.5 stepsize: 2
test_iter: 1 test_interval: 2 test_net: "dummy.prototxt"
max_iter: 4 display: 1 snapshot: 2 snapshot_prefix: "snap/m" random_seed: 3 {extra}
"""


def _label_images(folder, rng):
    os.makedirs(folder / "img")
    lines = []
    for i in range(4):
        name = f"img/{i}.{'png' if i % 2 else 'jpg'}"
        pixels = rng.integers(0, 256, (8, 8), dtype=np.uint8)
        Image.fromarray(pixels, "L").save(folder / name)
        lines.append(f"{name} {i % 3}")
    (folder / "list.txt").write_text("\n".join(lines) + "\n")


def _write_data(folder, rng):
    """The data files the sources read, and a mean file."""
    with DatumWriter(str(folder / "lmdb"), "lmdb") as writer:
        for i in range(6):
            datum = caffe_pb2.Datum(channels=1, height=8, width=8, label=i % 3,
                                    data=rng.integers(0, 256, 64, dtype=np.uint8).tobytes())
            writer.put(f"{i:08d}", datum)
    mean = caffe_pb2.BlobProto()
    fill_blob_proto(mean, np.full((1, 1, 8, 8), 100, np.float32))
    write_blob_proto(str(folder / "mean.binaryproto"), mean)
    with h5py.File(folder / "data.h5", "w") as h5:
        h5["data"] = rng.standard_normal((6, 1, 8, 8)).astype(np.float32)
        h5["label"] = (np.arange(6) % 3).astype(np.float32)
    (folder / "h5.txt").write_text("data.h5\n")
    _label_images(folder, rng)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A folder of good inputs, and snapshots of both formats from a real run."""
    folder = tmp_path_factory.mktemp("good")
    _write_data(folder, np.random.default_rng(0))
    (folder / "snap").mkdir()
    for name, source in SOURCES.items():
        (folder / f"{name}.prototxt").write_text(f'name: "{name}"\n{source}\n{BODY}')
    (folder / "solver.prototxt").write_text(SOLVER.format(extra=""))
    (folder / "solver_h5.prototxt").write_text(
        SOLVER.format(extra='snapshot_format: HDF5').replace("snap/m", "snap/h"))
    with _inside(folder):
        for solver in ("solver.prototxt", "solver_h5.prototxt"):
            result = run_in_process("train", "--solver", solver)
            assert result.code == 0, result.err
    return folder


@contextlib.contextmanager
def _inside(folder):
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


@contextlib.contextmanager
def _deadline(seconds):
    def expired(signum, frame):
        raise TimeoutError(f"the run took over {seconds} s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# --- damage ------------------------------------------------------------------------------------
NUMBERS = ["-1", "0", "1.5", "-0.0", "1e40", "nan", "inf", "-inf", "9223372036854775808",
           "4294967296", "1e-45", '"x"', "true"]


def damage_bytes(data, rng):
    """Flip bits, cut, zero or repeat a run, or insert noise."""
    data = bytearray(data)
    if not data:
        return bytes(rng.randrange(256) for _ in range(8))
    choice = rng.randrange(5)
    at = rng.randrange(len(data))
    if choice == 0:
        for _ in range(rng.randint(1, 8)):
            position = rng.randrange(len(data))
            data[position] ^= 1 << rng.randrange(8)
    elif choice == 1:
        del data[at:]
    elif choice == 2:
        data[at:at + rng.randint(1, 64)] = bytes(min(64, len(data) - at))
    elif choice == 3:
        data[at:at] = data[at:at + rng.randint(1, 256)]
    else:
        data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    return bytes(data)


def damage_text(text, rng):
    """Line and token edits a hand or a broken tool makes: a number swapped for an odd one, a
    line dropped, doubled or swapped, a word replaced, the file cut short, bytes damaged."""
    lines = text.splitlines(keepends=True)
    numbers = [m for m in re.finditer(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", text)]
    words = re.findall(r"[A-Za-z_]+", text)
    choice = rng.randrange(6)
    if choice == 0 and numbers:
        m = rng.choice(numbers)
        return text[:m.start()] + rng.choice(NUMBERS) + text[m.end():]
    if choice == 1 and len(lines) > 1:
        del lines[rng.randrange(len(lines))]
        return "".join(lines)
    if choice == 2 and lines:
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        return "".join(lines)
    if choice == 3 and words:
        word = rng.choice(words)
        return text.replace(word, rng.choice(words), 1)
    if choice == 4:
        return text[:rng.randrange(len(text) + 1)]
    return damage_bytes(text.encode(), rng).decode("utf-8", "replace")


WEIGHTS = "snap/m_iter_4.caffemodel"  # trained on DummyData of the other sources' shapes
# kind -> (the file damaged, relative to the run folder; text or bytes; argv)
KINDS = {
    "net prototxt": ("dummy.prototxt", "text", ["time", "--model", "dummy.prototxt",
                                                "--iterations", "1"]),
    "solver prototxt": ("solver.prototxt", "text", ["train", "--solver", "solver.prototxt"]),
    "caffemodel": ("snap/m_iter_4.caffemodel", "bytes",
                   ["test", "--model", "dummy.prototxt", "--weights",
                    "snap/m_iter_4.caffemodel", "--iterations", "1"]),
    "caffemodel.h5": ("snap/h_iter_4.caffemodel.h5", "bytes",
                      ["test", "--model", "dummy.prototxt", "--weights",
                       "snap/h_iter_4.caffemodel.h5", "--iterations", "1"]),
    "solverstate": ("snap/m_iter_2.solverstate", "bytes",
                    ["train", "--solver", "solver.prototxt", "--snapshot",
                     "snap/m_iter_2.solverstate"]),
    "solverstate.h5": ("snap/h_iter_2.solverstate.h5", "bytes",
                       ["train", "--solver", "solver_h5.prototxt", "--snapshot",
                        "snap/h_iter_2.solverstate.h5"]),
    "sidecar": ("snap/m_iter_2.solverstate.pycaffe.json", "text",
                ["train", "--solver", "solver.prototxt", "--snapshot",
                 "snap/m_iter_2.solverstate"]),
    "mean file": ("mean.binaryproto", "bytes", ["test", "--model", "lmdb.prototxt",
                                                "--iterations", "2", "--weights", WEIGHTS]),
    "lmdb": ("lmdb/data.mdb", "bytes", ["test", "--model", "lmdb.prototxt", "--iterations",
                                        "3", "--weights", WEIGHTS]),
    "hdf5 data": ("data.h5", "bytes", ["test", "--model", "hdf5.prototxt", "--iterations", "3",
                                       "--weights", WEIGHTS]),
    "image list": ("list.txt", "text", ["test", "--model", "images.prototxt",
                                        "--iterations", "2", "--weights", WEIGHTS]),
    "image": ("img/1.png", "bytes", ["test", "--model", "images.prototxt", "--iterations", "2",
                                     "--weights", WEIGHTS]),
    "jpeg for convert_imageset": ("img/0.jpg", "bytes",
                                  ["convert_imageset", "--gray", "./", "list.txt", "out_db"]),
}
# The sidecar of a damaged state no longer matches it (a refusal, rightly): those kinds run
# without it, as a Caffe-written snapshot would, so that the state's own reading is damaged.
WITHOUT_SIDECAR = {"solverstate": "snap/m_iter_2.solverstate.pycaffe.json",
                   "solverstate.h5": "snap/h_iter_2.solverstate.h5.pycaffe.json"}


def _case_ids():
    return [(kind, seed) for kind in KINDS for seed in range(CASES_PER_KIND)]


@pytest.mark.parametrize("kind, seed", _case_ids(), ids=[f"{k}-{s}" for k, s in _case_ids()])
def test_damaged_input_ends_cleanly(kind, seed, good, tmp_path, run_cli):
    target, form, argv = KINDS[kind]
    folder = tmp_path / "run"
    shutil.copytree(good, folder)
    if kind in WITHOUT_SIDECAR:
        os.remove(folder / WITHOUT_SIDECAR[kind])
    rng = random.Random(f"{kind}-{seed}")
    path = folder / target
    if form == "text":
        path.write_text(damage_text(path.read_text(), rng))
    else:
        path.write_bytes(damage_bytes(path.read_bytes(), rng))
    with _inside(folder), _deadline(SECONDS_PER_RUN):
        result = run_cli(*argv)
    errors = result.error_lines()
    assert "Traceback" not in result.err
    if result.code == 0:
        assert not errors
    else:
        assert result.code == 1 and len(errors) == 1, result.err[-3000:]
