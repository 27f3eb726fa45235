"""A corpus of bad inputs run through the ``pycaffe`` program: each must end with one error line.

Every case in ``CASES`` runs ``.venv/bin/pycaffe`` as a subprocess (so that a traceback, a hang
or a crash shows), in a folder of its own, and must:

- exit with its status (1 for a user error, 2 for a malformed command line);
- print no "Traceback" anywhere, and end stderr (after the log lines) with exactly one line
  ``pycaffe: error: ...`` that names the culprit (the file, flag, field or layer);
- leave no file behind in its folder and change nothing among the shared inputs.

Adding a case is one line: ``Bad("name", "command line", "culprit text", code=..., files={...},
env={...}, prepare=...)``. ``$word`` placeholders in all of these are replaced by the shared
inputs' paths (see ``_make_inputs``: $net, $train_net, $fifo, $dir, ...); ``files`` are written
into the case's folder (its working directory) first, then ``prepare(folder, values)`` runs
when given (for what text files cannot set up: permissions, links). The cases run in
parallel, once per session.
"""
import os
import shlex
import signal
import string
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import pytest

from pycaffe_cli.io.input_files import MAX_PROTO_BYTES, MAX_PROTOTXT_BYTES

PYCAFFE = os.path.join(os.path.dirname(sys.executable), "pycaffe")
TIMEOUT_S = 120
WORKERS = max(2, min(4, os.cpu_count() or 2))


@dataclass
class Bad:
    """One bad input: ``pycaffe <args>`` must exit with ``code`` and an error line holding
    ``culprit``. ``files``: name -> text written into the case's folder; ``env``: extra
    environment variables; ``prepare``: called as ``prepare(folder, values)`` before the run."""

    name: str
    args: str
    culprit: str
    code: int = 1
    files: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    prepare: Callable = None


def data_net(layer):
    """A net made of one layer (for data-layer cases: ``pycaffe time`` sets it up)."""
    return f'name: "bad"\nlayer {{ {layer} }}\n'


def solver(*lines):
    """A solver training the shared tiny net, plus ``lines``."""
    return "\n".join(['net: "$train_net"', "base_lr: 0.1", 'lr_policy: "fixed"',
                      "max_iter: 2"] + list(lines)) + "\n"


def python_net(module="exiting"):
    return ('name: "py"\n'
            'layer { name: "data" type: "Input" top: "data" '
            "input_param { shape { dim: 2 dim: 3 } } }\n"
            'layer { name: "exit" type: "Python" bottom: "data" top: "out" '
            f'python_param {{ module: "{module}" layer: "Exiting" }} }}\n')


TIME = "time --model n.prototxt --iterations 1"
# A binary SolverState at iteration 1 whose two zero history blobs fit TRAIN_NET's
# InnerProduct (2x3 weights, 2 biases); its bytes are all ASCII, so it can be a text file.
STATE = ("\x08\x01\x1a *\x18" + "\x00" * 24 + ":\x04\n\x02\x02\x03\x1a\x0f*\x08"
         + "\x00" * 8 + ":\x03\n\x01\x02")
RESUME = "r.solverstate.pycaffe.json"
BAD_RNG = ('{"format": 1, "train": {}, "test": [], "rng": {"bit_generator": "PCG64", '
           '"state": {"state": "7", "inc": 1}, "has_uint32": 0, "uinteger": 0}}')
LONG_NAME = "p" * 300
H5 = 'name: "data" type: "HDF5Data" top: "data" hdf5_data_param { source: "%s" batch_size: 1 }'
IMAGES = ('name: "data" type: "ImageData" top: "data" top: "label" '
          'image_data_param { source: "%s" batch_size: 1 }')
DATA = 'name: "data" type: "Data" top: "data" data_param { source: "%s" batch_size: 1 %s}'
MEAN = ('name: "data" type: "Data" top: "data" transform_param { mean_file: "%s" } '
        'data_param { source: "$lmdb" batch_size: 1 backend: LMDB }')
WINDOWS = ('name: "data" type: "WindowData" top: "data" top: "label" transform_param '
           '{ crop_size: 4 } window_data_param { source: "$fifo" batch_size: 1 }')
INFOGAIN = ('name: "bad"\n'
            'layer { name: "p" type: "Input" top: "p" top: "l" input_param { shape { dim: 2 '
            "dim: 3 } shape { dim: 2 } } }\n"
            'layer { name: "loss" type: "InfogainLoss" bottom: "p" bottom: "l" top: "loss" '
            'infogain_loss_param { source: "$fifo" } }\n')

# ---- the corpus: one line per case ------------------------------------------------------
CASES = [
    # input files that are not regular files, or too large
    Bad("model-fifo", "time --model $fifo", "net file '$fifo': Is a named pipe"),
    Bad("model-dir", "time --model $dir", "net file '$dir': Is a directory"),
    Bad("model-dev-null", "time --model /dev/null", "'/dev/null': Is a character device"),
    Bad("model-stdin", "time --model /dev/stdin", "'/dev/stdin': Is a character device"),
    Bad("model-too-large", "time --model $big_prototxt", "128 MiB (MAX_PROTOTXT_BYTES)"),
    Bad("weights-dev-zero", "test --model $net --weights /dev/zero",
        "weights file '/dev/zero': Is a character device"),
    Bad("weights-fifo", "test --model $net --weights $fifo", "weights file '$fifo': Is a named"),
    Bad("weights-dir", "test --model $net --weights $dir", "weights file '$dir': Is a dir"),
    Bad("weights-too-large", "test --model $net --weights $big_caffemodel",
        "binary proto of 2 GiB"),
    Bad("solver-fifo", "train --solver $fifo", "solver file '$fifo': Is a named pipe"),
    Bad("solver-net-fifo", "train --solver s.prototxt", "net file '$fifo': Is a named pipe",
        files={"s.prototxt": 'net: "$fifo"\nlr_policy: "fixed"\n'}),
    Bad("snapshot-fifo", "train --solver s.prototxt --snapshot $fifo", "$fifo",
        files={"s.prototxt": solver()}),
    Bad("data-source-fifo", TIME, 'layer "data": cannot open LMDB \'$fifo\': Is a named pipe',
        files={"n.prototxt": data_net(DATA % ("$fifo", "backend: LMDB "))}),
    Bad("data-source-file", TIME, "cannot open LMDB '$net': Is a regular file, not a folder",
        files={"n.prototxt": data_net(DATA % ("$net", "backend: LMDB "))}),
    Bad("data-mdb-fifo", TIME, "data.mdb: Is a named pipe",
        files={"n.prototxt": data_net(DATA % ("$fifo_lmdb", "backend: LMDB "))}),
    Bad("hdf5-list-fifo", TIME, "HDF5 source list '$fifo': Is a named pipe",
        files={"n.prototxt": data_net(H5 % "$fifo")}),
    Bad("hdf5-listed-fifo", TIME, "HDF5 file '$fifo' (listed in 'list.txt'): Is a named pipe",
        files={"n.prototxt": data_net(H5 % "list.txt"), "list.txt": "$fifo\n"}),
    Bad("hdf5-listed-dev-zero", TIME, "HDF5 file '/dev/zero' (listed in 'list.txt'): Is a",
        files={"n.prototxt": data_net(H5 % "list.txt"), "list.txt": "/dev/zero\n"}),
    Bad("image-list-dev-zero", TIME, "image list '/dev/zero': Is a character device",
        files={"n.prototxt": data_net(IMAGES % "/dev/zero")}),
    Bad("image-listed-fifo", TIME, "image file '$fifo': Is a named pipe",
        files={"n.prototxt": data_net(IMAGES % "list.txt"), "list.txt": "$fifo 0\n"}),
    Bad("window-file-fifo", TIME, "window file '$fifo': Is a named pipe",
        files={"n.prototxt": data_net(WINDOWS)}),
    Bad("mean-file-fifo", TIME, "mean file '$fifo': Is a named pipe",
        files={"n.prototxt": data_net(MEAN % "$fifo")}),
    Bad("mean-file-dev-zero", TIME, "mean file '/dev/zero': Is a character device",
        files={"n.prototxt": data_net(MEAN % "/dev/zero")}),
    Bad("infogain-fifo", TIME, "infogain matrix file '$fifo': Is a named pipe",
        files={"n.prototxt": INFOGAIN}),
    Bad("convert-listfile-fifo", "convert_imageset $dir/ $fifo out_db", "LISTFILE '$fifo'"),
    Bad("image-mean-db-fifo", "compute_image_mean $fifo", "LMDB '$fifo': Is a named pipe"),
    # impossible paths: NUL bytes, longer than PATH_MAX or NAME_MAX
    Bad("data-source-nul", TIME, 'n.prototxt:2: layer "data": data_param.source \'a\\x00b\'',
        files={"n.prototxt": data_net(DATA % ("a\\000b", ""))}),
    Bad("hdf5-source-nul", TIME, 'layer "data": hdf5_data_param.source \'a\\x00b\': the path',
        files={"n.prototxt": data_net(H5 % "a\\000b")}),
    Bad("solver-net-nul", "train --solver s.prototxt", "s.prototxt: net 'a\\x00b': the path",
        files={"s.prototxt": 'net: "a\\000b"\n'}),
    Bad("snapshot-prefix-nul", "train --solver s.prototxt", "s.prototxt: snapshot_prefix 'x",
        files={"s.prototxt": solver('snapshot_prefix: "x\\000y"', "snapshot: 1")}),
    Bad("snapshot-prefix-name-max", "train --solver s.prototxt", "snapshot_prefix 'ppp",
        files={"s.prototxt": solver(f'snapshot_prefix: "{LONG_NAME}"', "snapshot: 1")}),
    Bad("model-path-max", "time --model " + "d/" * 2100 + "n", "--model 'd/d/"),
    Bad("weights-name-max", f"test --model $net --weights $net,{LONG_NAME}",
        "--weights 'ppp"),
    # a Python layer that calls sys.exit: one line naming it; its status, never 0
    Bad("python-exit-forward", TIME, 'layer "exit": Python layer exiting.Exiting called '
        "sys.exit(3) in forward", code=3, files={"n.prototxt": python_net()},
        env={"EXIT_IN": "forward", "EXIT_CODE": "3"}),
    Bad("python-exit-0-setup", TIME, "n.prototxt:3: layer \"exit\": Python layer "
        "exiting.Exiting called sys.exit(0) in setup", files={"n.prototxt": python_net()},
        env={"EXIT_IN": "setup", "EXIT_CODE": "0"}),
    Bad("python-exit-import", TIME, "called sys.exit('no GPU here') in module \"exiting\" at "
        "import", files={"n.prototxt": python_net()},
        env={"EXIT_IN": "import", "EXIT_CODE": "no GPU here"}),
    # ---- further cases go here, one line each ----
    # damaged resume files (part "durability"): the file and the field are named
    Bad("resume-sidecar-not-json", "train --solver s.prototxt --snapshot r.solverstate",
        "r.solverstate.pycaffe.json: cannot read the resume state (Expecting value",
        files={"s.prototxt": solver(), "r.solverstate": STATE, RESUME: "not json"}),
    Bad("resume-sidecar-null", "train --solver s.prototxt --snapshot r.solverstate",
        "r.solverstate.pycaffe.json: not a pycaffe resume state: expected a JSON object, "
        "found null", files={"s.prototxt": solver(), "r.solverstate": STATE, RESUME: "null"}),
    Bad("resume-sidecar-bad-rng", "train --solver s.prototxt --snapshot r.solverstate",
        'r.solverstate.pycaffe.json: field "rng.state.state": must be an integer, found a '
        "string", files={"s.prototxt": solver(), "r.solverstate": STATE, RESUME: BAD_RNG}),
    Bad("resume-state-corrupt", "train --solver s.prototxt --snapshot r.solverstate",
        "r.solverstate: not a binary SolverState file (damaged or truncated",
        files={"s.prototxt": solver(), "r.solverstate": "junk"}),
    Bad("resume-state-not-hdf5", "train --solver s.prototxt --snapshot r.solverstate.h5",
        "r.solverstate.h5: cannot read HDF5 solver state (damaged or truncated",
        files={"s.prototxt": solver(), "r.solverstate.h5": "junk"}),
]

EXITING_LAYER = '''\
import os
import sys

import caffe

WHERE = os.environ.get("EXIT_IN", "forward")
CODE = os.environ.get("EXIT_CODE", "3")
CODE = int(CODE) if CODE.isdigit() else CODE
if WHERE == "import":
    sys.exit(CODE)


class Exiting(caffe.Layer):
    def setup(self, bottom, top):
        if WHERE == "setup":
            sys.exit(CODE)

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        if WHERE == "forward":
            sys.exit(CODE)
        top[0].data[...] = bottom[0].data

    def backward(self, top, propagate_down, bottom):
        pass
'''
NET = ('name: "tiny"\n'
       'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }\n'
       'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" '
       "inner_product_param { num_output: 2 } }\n")
TRAIN_NET = ('name: "tiny"\n'
             'layer { name: "data" type: "DummyData" top: "data" top: "label" dummy_data_param '
             "{ shape { dim: 2 dim: 3 } shape { dim: 2 } } }\n"
             'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" '
             "inner_product_param { num_output: 2 } }\n"
             'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" '
             'top: "loss" }\n')


def _sparse(path, size):
    """A file of ``size`` bytes that takes no disk space."""
    with open(path, "wb") as stream:
        stream.truncate(size)


def _make_inputs(root):
    """The shared inputs the cases name as $placeholders; returns the placeholder values."""
    root.mkdir()
    (root / "net.prototxt").write_text(NET)
    (root / "train.prototxt").write_text(TRAIN_NET)
    (root / "exiting.py").write_text(EXITING_LAYER)
    (root / "folder").mkdir()
    os.mkfifo(root / "fifo")
    (root / "fifo_lmdb").mkdir()
    os.mkfifo(root / "fifo_lmdb" / "data.mdb")
    (root / "lmdb").mkdir()
    (root / "lmdb" / "data.mdb").write_bytes(b"")
    _sparse(root / "big.prototxt", MAX_PROTOTXT_BYTES + 1)
    _sparse(root / "big.caffemodel", MAX_PROTO_BYTES + 1)
    names = {"net": "net.prototxt", "train_net": "train.prototxt", "fifo": "fifo",
             "dir": "folder", "fifo_lmdb": "fifo_lmdb", "lmdb": "lmdb",
             "big_prototxt": "big.prototxt", "big_caffemodel": "big.caffemodel"}
    values = {key: str(root / name) for key, name in names.items()}
    values["inputs"] = str(root)
    return values


def _listing(folder):
    return sorted(os.path.relpath(os.path.join(top, name), folder)
                  for top, dirs, files in os.walk(folder) for name in dirs + files)


def _run_case(case, folder, values):
    """Write the case's files, run it; return (CompletedProcess or None if it hung, the
    folder's listing before, after)."""
    fill = string.Template
    folder.mkdir()
    for name, text in case.files.items():
        (folder / name).write_text(fill(text).substitute(values))
    if case.prepare is not None:
        case.prepare(folder, values)
    before = _listing(folder)
    env = dict(os.environ, PYTHONPATH=values["inputs"])
    env.update({key: fill(value).substitute(values) for key, value in case.env.items()})
    argv = [fill(word).substitute(values) for word in shlex.split(case.args)]
    try:
        result = subprocess.run([PYCAFFE] + argv, cwd=folder, env=env, text=True,
                                stdin=subprocess.DEVNULL, capture_output=True,
                                timeout=TIMEOUT_S, errors="backslashreplace")
    except subprocess.TimeoutExpired:
        result = None
    return result, before, _listing(folder)


def _selected_cases(session):
    return [item.callspec.params["case"] for item in session.items
            if item.module.__name__ == __name__ and hasattr(item, "callspec")
            and "case" in item.callspec.params]


@pytest.fixture(scope="module")
def corpus(request, tmp_path_factory):
    """Run every selected case (in parallel); name -> (result, values, before, after)."""
    base = tmp_path_factory.mktemp("bad_inputs")
    values = _make_inputs(base / "inputs")
    inputs_before = _listing(base / "inputs")
    cases = _selected_cases(request.session)
    with ThreadPoolExecutor(WORKERS) as pool:
        futures = {case.name: pool.submit(_run_case, case, base / case.name, values)
                   for case in cases}
        outcomes = {name: future.result() for name, future in futures.items()}
    return outcomes, values, (inputs_before, _listing(base / "inputs"))


@pytest.mark.skipif(not os.path.exists(PYCAFFE), reason="the pycaffe script is not installed")
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_bad_input_ends_with_one_error_line(case, corpus):
    outcomes, values, _ = corpus
    result, before, after = outcomes[case.name]
    assert result is not None, f"pycaffe {case.args} hung (no exit within {TIMEOUT_S} s)"
    err = result.stderr
    assert "Traceback" not in err, err[-3000:]
    lines = err.rstrip("\n").splitlines()
    errors = [line for line in lines if line.startswith("pycaffe: error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], err[-3000:]
    culprit = string.Template(case.culprit).substitute(values)
    assert culprit in errors[0]
    assert result.returncode == case.code, errors[0]
    assert after == before, "the run left files behind"


def test_shared_inputs_are_untouched(corpus):
    before, after = corpus[2]
    assert after == before


def test_case_names_are_unique():
    names = [case.name for case in CASES]
    assert len(names) == len(set(names))


# ---- closed pipes: quiet, with the status a shell reports for SIGPIPE ----------------------
def _closed_pipe():
    read_end, write_end = os.pipe()
    os.close(read_end)
    return write_end


@pytest.mark.skipif(not os.path.exists(PYCAFFE), reason="the pycaffe script is not installed")
def test_closed_stdout_stops_quietly():
    """``pycaffe layers | head -1``: no BrokenPipeError traceback, no complaint at exit."""
    write_end = _closed_pipe()
    try:
        result = subprocess.run([PYCAFFE, "layers"], stdout=write_end, stderr=subprocess.PIPE,
                                text=True, timeout=TIMEOUT_S)
    finally:
        os.close(write_end)
    assert result.stderr == ""
    assert result.returncode == 128 + signal.SIGPIPE


@pytest.mark.skipif(not os.path.exists(PYCAFFE), reason="the pycaffe script is not installed")
def test_closed_stderr_stops_the_run(tmp_path):
    """``pycaffe train ... 2>&1 | head``: the run stops instead of going on unread."""
    (tmp_path / "net.prototxt").write_text(NET)
    write_end = _closed_pipe()
    try:
        result = subprocess.run([PYCAFFE, "time", "--model", "net.prototxt"], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=write_end, text=True,
                                timeout=TIMEOUT_S)
    finally:
        os.close(write_end)
    assert result.stdout == ""
    assert result.returncode == 128 + signal.SIGPIPE
    assert os.listdir(tmp_path) == ["net.prototxt"]


# ---- in-process: what a real command line cannot carry ------------------------------------
@pytest.mark.parametrize("argv, culprit", [
    (["test", "--model", "a\0b", "--weights", "w"], "--model 'a\\x00b': the path contains a NUL"),
    (["test", "--model", "m", "--weights", "w,x\0"], "--weights 'x\\x00': the path contains"),
    (["train", "--solver", "s", "--snapshot", "\0"], "--snapshot '\\x00'"),
    (["convert_imageset", "root/", "list\0.txt", "db"], "LISTFILE 'list\\x00.txt': the value"),
    (["test", "--model", "m", "--weights", "w", "--gpu", "0\0"], "--gpu '0\\x00'"),
])
def test_nul_in_a_command_line_value_names_the_flag(run_cli, tmp_path, monkeypatch, argv,
                                                    culprit):
    monkeypatch.chdir(tmp_path)
    result = run_cli(*argv)
    assert result.code == 1
    lines = result.error_lines()
    assert len(lines) == 1 and lines[0].startswith(f"pycaffe: error: {culprit}")
    assert os.listdir(tmp_path) == []
