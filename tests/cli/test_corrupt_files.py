"""Damaged data files end in one line naming the file: never a traceback, a hang or a crash.

Each case writes a small valid file with the project's own writers (or h5py / lmdb), damages
copies of it at seeded positions (bit flips, truncation) and runs a command in-process. Not
every flip can be seen (a flipped pixel is still a pixel), so a run may also succeed; what is
checked is that it ends with exit 0 and no error line, or with exit 1 and exactly one
``pycaffe: error:`` line that names the file, and that some of the damage is detected. LMDBs
are read by pycaffe's own page reader (pure Python, so no crash is possible); HDF5 goes
through the HDF5 library, in which thousands of seeded flips of these files found no crash,
so those cases run in-process too.
"""
import os
import random
import struct

import h5py
import lmdb
import numpy as np
import pytest

from pycaffe_cli.net.net import Net
from pycaffe_cli.net.weights import save_hdf5
from pycaffe_cli.proto import caffe_pb2

SEEDS = range(10)
PAGE = 4096

# --- damage ---------------------------------------------------------------------------------


def damaged(data, seed, how, positions=None):
    """A copy of ``data`` with 1-3 bits flipped (at ``positions`` when given) or cut short."""
    rng = random.Random(seed)
    if how == "truncate":
        return data[:rng.randrange(len(data))]
    copy = bytearray(data)
    for _ in range(1 + seed % 3):
        position = rng.choice(positions) if positions else rng.randrange(len(copy))
        copy[position] ^= 1 << rng.randrange(8)
    return bytes(copy)


def tree_positions(data_mdb):
    """Byte offsets in an LMDB's meta, branch and leaf pages: headers, node offsets, the
    first nodes (where a flip changes the structure rather than a value)."""
    positions = []
    for page in range(len(data_mdb) // PAGE):
        flags = struct.unpack_from("<H", data_mdb, page * PAGE + 10)[0]
        if not flags & 0x04:   # not an overflow page
            positions += range(page * PAGE, page * PAGE + 160)
    return positions


def check_outcome(result, name):
    """Exit 0 and no error line, or exit 1 and one error line naming ``name``; True if the
    damage was reported."""
    assert "Traceback" not in result.err, result.err
    errors = result.error_lines()
    if result.code == 0:
        assert errors == [], result.err
        return False
    assert result.code == 1, result.err
    assert len(errors) == 1, result.err
    assert name in errors[0], errors[0]
    return True


# --- nets and files ---------------------------------------------------------------------------

IP_NET = """\
name: "tiny"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 1 } } }
layer { name: "group/ip2" type: "InnerProduct" bottom: "ip" top: "ip2"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 1 } } }
"""

TRAIN_NET = """\
name: "tiny"
layer { name: "data" type: "DummyData" top: "data" top: "target"
  dummy_data_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 2 }
                     data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 1 } } }
layer { name: "group/ip2" type: "InnerProduct" bottom: "ip" top: "ip2"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 1 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "ip2" bottom: "target" top: "loss" }
"""

DATA_NET = """\
name: "reader"
layer { name: "data" type: "Data" top: "data" top: "label"
  data_param { source: "SOURCE" backend: LMDB batch_size: 10 } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 1 } } }
"""

HDF5_NET = """\
name: "reader"
layer { name: "data" type: "HDF5Data" top: "data" top: "label"
  hdf5_data_param { source: "SOURCE" batch_size: 4 } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 1 } } }
"""


@pytest.fixture
def h5_weights(write, tmp_path):
    """(prototxt, bytes of its valid .caffemodel.h5): nested groups for "group/ip2"."""
    proto = write("tiny.prototxt", IP_NET)
    path = str(tmp_path / "good.caffemodel.h5")
    save_hdf5(Net.from_file(proto, caffe_pb2.TEST), path)
    with open(path, "rb") as stream:
        return proto, stream.read()


def write_lmdb(path, count, shape, seed=0):
    """An LMDB of ``count`` raw uint8 Datums of ``shape``, as Caffe's tools key them."""
    pixels = np.random.default_rng(seed).integers(0, 256, (count,) + shape, dtype=np.uint8)
    env = lmdb.open(str(path), map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i, image in enumerate(pixels):
            datum = caffe_pb2.Datum(channels=shape[0], height=shape[1], width=shape[2],
                                    data=image.tobytes(), label=i % 2)
            txn.put(f"{i:08d}".encode(), datum.SerializeToString())
    env.close()
    with open(os.path.join(path, "data.mdb"), "rb") as stream:
        return stream.read()


# Small records (several leaf pages under a branch page) and large ones (overflow pages).
LMDB_LAYOUTS = {"inline": (150, (1, 8, 8)), "overflow": (20, (3, 32, 32))}


@pytest.fixture(params=sorted(LMDB_LAYOUTS))
def lmdb_source(request, tmp_path):
    """(bytes of a valid data.mdb, its number of records)."""
    count, shape = LMDB_LAYOUTS[request.param]
    return write_lmdb(tmp_path / "good_lmdb", count, shape), count


def damaged_lmdbs(folder, data):
    """Folders ``bad_lmdb<i>`` in ``folder``, each with a damaged copy of ``data``: flips
    in the tree pages, flips anywhere, truncations. A new folder each time, as a process
    keeps the databases it has open (layers/data.py)."""
    tree = tree_positions(data)
    damages = [damaged(data, seed, "flip", tree) for seed in SEEDS]
    damages += [damaged(data, seed + 100, "flip") for seed in SEEDS]
    damages += [damaged(data, seed, "truncate") for seed in SEEDS]
    for index, damage in enumerate(damages):
        bad = folder / f"bad_lmdb{index}"
        bad.mkdir()
        put_data_mdb(bad, damage)
        yield bad


def put_data_mdb(folder, data):
    with open(folder / "data.mdb", "wb") as stream:
        stream.write(data)


# --- weights ----------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["flip", "truncate"])
def test_caffemodel_h5_weights_for_test(run_cli, h5_weights, tmp_path, how):
    proto, data = h5_weights
    bad = tmp_path / "bad.caffemodel.h5"
    reported = 0
    for seed in SEEDS:
        bad.write_bytes(damaged(data, seed, how))
        result = run_cli("test", "--model", proto, "--weights", bad, "--iterations", 1)
        reported += check_outcome(result, "bad.caffemodel.h5")
    assert reported


def test_caffemodel_h5_weights_for_train(run_cli, write, h5_weights, tmp_path):
    _, data = h5_weights
    write("train.prototxt", TRAIN_NET)
    solver = write("solver.prototxt", f"""\
        net: "{tmp_path / 'train.prototxt'}"
        base_lr: 0.01 lr_policy: "fixed" max_iter: 1 display: 1
        snapshot_prefix: "{tmp_path / 'snap'}"
        """)
    bad = tmp_path / "bad.caffemodel.h5"
    reported = 0
    for seed in range(6):
        bad.write_bytes(damaged(data, seed, "flip" if seed % 2 else "truncate"))
        result = run_cli("train", "--solver", solver, "--weights", bad)
        reported += check_outcome(result, "bad.caffemodel.h5")
    assert reported


def test_h5_group_linked_into_itself_is_no_endless_walk(run_cli, h5_weights, tmp_path):
    proto, data = h5_weights
    bad = tmp_path / "loop.caffemodel.h5"
    bad.write_bytes(data)
    with h5py.File(bad, "a") as handle:
        handle["data/group/again"] = handle["data/group"]
    result = run_cli("test", "--model", proto, "--weights", bad, "--iterations", 1)
    assert result.code == 0, result.err


# --- HDF5Data ---------------------------------------------------------------------------------

def write_h5_data(path, rows=4, seed=0):
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as handle:
        handle["data"] = rng.random((rows, 3), dtype=np.float32)
        handle["label"] = np.arange(rows, dtype=np.float32)


@pytest.mark.parametrize("how", ["flip", "truncate"])
@pytest.mark.parametrize("which", ["first", "second"], ids=["at-setup", "mid-run"])
def test_hdf5_data_source(run_cli, write, tmp_path, how, which):
    """The first listed file is read at set-up, the second when the first is used up."""
    good, bad = tmp_path / "good.h5", tmp_path / "bad.h5"
    write_h5_data(good)
    data = good.read_bytes()
    files = [bad, good] if which == "first" else [good, bad]
    source = write("list.txt", "".join(f"{path}\n" for path in files))
    proto = write("net.prototxt", HDF5_NET.replace("SOURCE", source))
    reported = 0
    for seed in SEEDS:
        bad.write_bytes(damaged(data, seed, how))
        result = run_cli("time", "--model", proto, "--phase", "TEST", "--iterations", 2)
        reported += check_outcome(result, "bad.h5")
    assert reported


# --- LMDB: the Data layer, at open and on the prefetch thread ---------------------------------

def test_data_layer_lmdb(run_cli, write, lmdb_source, tmp_path):
    """Every record is read (the epoch runs out mid-run on the prefetch thread)."""
    data, count = lmdb_source
    reported = 0
    for folder in damaged_lmdbs(tmp_path, data):
        proto = write("net.prototxt", DATA_NET.replace("SOURCE", str(folder)))
        result = run_cli("time", "--model", proto, "--phase", "TEST",
                         "--iterations", count // 10 + 1)
        reported += check_outcome(result, folder.name)
    assert reported


def leaf_pages(data):
    return [page for page in range(len(data) // PAGE)
            if struct.unpack_from("<H", data, page * PAGE + 10)[0] & 0x02]


def test_damage_found_on_the_prefetch_thread_ends_the_run(run_cli, write, tmp_path):
    """The last leaf page is damaged: batches are served until the reader gets there, then
    the thread's error ends the run with one line naming the layer, database and record."""
    folder = tmp_path / "lmdb"
    data = bytearray(write_lmdb(folder, *LMDB_LAYOUTS["inline"]))
    last = leaf_pages(data)[-1]
    data[last * PAGE + 12:last * PAGE + 14] = b"\xff\xff"   # lower past upper
    put_data_mdb(folder, bytes(data))
    proto = write("net.prototxt", DATA_NET.replace("SOURCE", str(folder)))
    weights = tmp_path / "w.caffemodel.h5"
    save_hdf5(Net.from_file(proto, caffe_pb2.TEST), str(weights))
    result = run_cli("test", "--model", proto, "--weights", weights, "--iterations", 15)
    assert result.code == 1, result.err
    assert "Batch 0, ip = " in result.err
    [line] = result.error_lines()
    assert 'layer "data"' in line and str(folder) in line and f"page {last}" in line
    assert "(after record '000001" in line
    assert "Traceback" not in result.err


def test_damage_on_the_prefetch_thread_ends_training(run_cli, write, tmp_path):
    folder = tmp_path / "lmdb"
    data = bytearray(write_lmdb(folder, *LMDB_LAYOUTS["inline"]))
    last = leaf_pages(data)[-1]
    data[last * PAGE + 10] = 0x01   # a branch page where a leaf should be
    put_data_mdb(folder, bytes(data))
    write("train.prototxt", DATA_NET.replace("SOURCE", str(folder)) + """
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
""")
    solver = write("solver.prototxt", f"""\
        net: "{tmp_path / 'train.prototxt'}"
        base_lr: 0.01 lr_policy: "fixed" max_iter: 20 display: 1
        snapshot_prefix: "{tmp_path / 'snap'}"
        """)
    result = run_cli("train", "--solver", solver)
    assert result.code == 1, result.err
    [line] = result.error_lines()
    assert 'layer "data"' in line and str(folder) in line and f"page {last}" in line
    assert "Traceback" not in result.err


# --- compute_image_mean and extract_features --------------------------------------------------

def test_compute_image_mean_input(run_cli, lmdb_source, tmp_path):
    data, _ = lmdb_source
    reported = 0
    for folder in damaged_lmdbs(tmp_path, data):
        mean = tmp_path / f"{folder.name}.binaryproto"
        result = run_cli("compute_image_mean", folder, mean)
        reported += check_outcome(result, folder.name)
        assert mean.exists() == (result.code == 0)
    assert reported


def test_extract_features_input(run_cli, write, lmdb_source, tmp_path):
    data, count = lmdb_source
    reported = 0
    for folder in damaged_lmdbs(tmp_path, data):
        proto = write("net.prototxt", DATA_NET.replace("SOURCE", str(folder)))
        weights = tmp_path / "w.caffemodel.h5"
        if not weights.exists():
            save_hdf5(Net.from_file(proto, caffe_pb2.TEST), str(weights))
        out = tmp_path / f"features_{folder.name}"
        result = run_cli("extract_features", weights, proto, "ip", out, count // 10 + 1,
                         "lmdb")
        if check_outcome(result, folder.name):
            reported += 1
            assert not [name for name in os.listdir(tmp_path) if out.name in name]
    assert reported
