"""``pycaffe train`` with a tiny solver: Caffe's log lines, snapshots, resume, finetune, signals."""
import os
import re
import signal

import pytest

from pycaffe_cli import backend
from pycaffe_cli.layers.base import layer_class
from pycaffe_cli.proto import caffe_pb2
from tests.cli.test_cli_score import NET, expected_outputs
from tests.gpu_helpers import DEVICES

SOLVER = {"test_iter": [2], "test_interval": 2, "base_lr": 0.1, "lr_policy": '"fixed"',
          "display": 1, "max_iter": 4, "snapshot": 2, "random_seed": 1}
# A short run: one iteration, no tests or snapshots.
NO_TESTS = {"test_interval": 1000, "test_initialization": "false"}
QUICK = {"max_iter": 1, "snapshot": 0, "snapshot_after_train": "false", **NO_TESTS}


@pytest.fixture
def make_solver(write, tmp_path):
    """Write the tiny net and a solver for it; ``make_solver(field=value, ...)`` overrides
    SOLVER's fields (a list value repeats the field) and returns the solver's path."""
    net = write("tiny.prototxt", NET.replace("num_output: 3 }", "num_output: 3 weight_filler "
                                             "{ type: 'gaussian' std: 0.1 } }"))
    (tmp_path / "snap").mkdir()

    def make(**fields):
        fields = {"net": f'"{net}"', "snapshot_prefix": f'"{tmp_path / "snap" / "tiny"}"',
                  **SOLVER, **fields}
        lines = [f"{name}: {value}" for name, values in fields.items()
                 for value in (values if isinstance(values, list) else [values])]
        return write("solver.prototxt", "\n".join(lines) + "\n")
    return make


def snap(tmp_path, iteration, extension=".caffemodel"):
    return str(tmp_path / "snap" / f"tiny_iter_{iteration}{extension}")


def iterations_logged(messages):
    return [int(m.split()[1]) for m in messages
            if re.match(r"Iteration \d+ \(.* iter/s, .*s/1 iters\), loss = ", m)]


# CPU, and the GPU with both spellings of the flag.
TRAIN_DEVICES = DEVICES + [pytest.param(["-gpu=0"], id="gpu_eq", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", TRAIN_DEVICES)
def test_train_logs_like_caffe(run_cli, make_solver, tmp_path, device):
    solver = make_solver()
    result = run_cli("train", "-solver", solver, *device)
    assert result.code == 0, result.err
    messages = result.messages
    if device:
        assert "Using GPUs 0" in messages
        assert any(m.startswith("GPU 0: ") for m in messages)
    else:
        assert "Use CPU." in messages
    assert messages.index("Starting Optimization") < messages.index("Solving tiny")
    assert iterations_logged(messages) == [0, 1, 2, 3]
    assert [m for m in messages if m.endswith("Testing net (#0)")] == [
        "Iteration 0, Testing net (#0)", "Iteration 2, Testing net (#0)",
        "Iteration 4, Testing net (#0)"]
    assert any(re.fullmatch(r"    Test net output #0: accuracy = [\d.]+", m) for m in messages)
    for iteration in (2, 4):
        assert f"Snapshotting to binary proto file {snap(tmp_path, iteration)}" in messages
        assert os.path.exists(snap(tmp_path, iteration, ".solverstate"))
    assert messages[-2:] == ["Optimization Done.", "Optimization Done."]
    assert "Traceback" not in result.err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert backend.mode() is backend.Mode.CPU   # run_cli restores it
    if device:  # the device trains to the CPU's losses
        cpu = run_cli("train", "-solver", solver)
        assert cpu.code == 0, cpu.err
        assert len(_losses(result)) == 4
        assert _losses(result) == pytest.approx(_losses(cpu), rel=1e-4)


@pytest.mark.parametrize("spelling", [["-solver", "{}"], ["-solver={}"], ["--solver={}"],
                                      ["--solver", "{}"]])
def test_solver_flag_spellings(run_cli, make_solver, spelling):
    solver = make_solver(**QUICK)
    result = run_cli("train", *[word.format(solver) for word in spelling])
    assert result.code == 0, result.err
    assert "Optimization Done." in result.messages


def test_level_and_stage_reach_the_train_net(run_cli, make_solver):
    solver = make_solver(**QUICK)
    result = run_cli("train", "-solver", solver, "-level", "2", "-stage", "probs,other")
    assert result.code == 0, result.err
    train_net = result.err.split("Creating training net")[1].split("Creating test net")[0]
    assert "Creating Layer bonus" in train_net and "Creating Layer prob" in train_net
    assert re.search(r'state \{\s*phase: TRAIN\s*level: 2\s*stage: "probs"\s*stage: "other"',
                     train_net)


def test_finetune_copies_weights_into_train_and_test_nets(run_cli, make_solver, tmp_path):
    from tests.cli.test_cli_score import BIAS, WEIGHT
    from pycaffe_cli.net.net import Net
    from pycaffe_cli.net.weights import save_binaryproto
    net = Net.from_file(str(tmp_path / "tiny.prototxt"), caffe_pb2.TEST)
    net.layer_by_name("ip").blobs[0].data[...] = WEIGHT
    net.layer_by_name("ip").blobs[1].data[...] = BIAS
    weights = str(tmp_path / "given.caffemodel")
    save_binaryproto(net, weights)
    result = run_cli("train", "-solver", make_solver(max_iter=1), "-weights", weights)
    assert result.code == 0, result.err
    messages = result.messages
    assert messages.count(f"Finetuning from {weights}") == 1
    want = expected_outputs()["loss"]
    [first] = [m for m in messages if m.startswith("Iteration 0 (")]
    assert float(first.rsplit(" = ", 1)[1]) == pytest.approx(want, rel=1e-5)
    test_loss = [m for m in messages if m.startswith("    Test net output #1: loss = ")][0]
    assert float(test_loss.split(" = ")[1].split()[0]) == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_resume_from_a_snapshot(run_cli, make_solver, tmp_path, device):
    solver = make_solver()
    assert run_cli("train", "-solver", solver, *device).code == 0
    first = open(snap(tmp_path, 4), "rb").read()
    os.remove(snap(tmp_path, 4))
    state = snap(tmp_path, 2, ".solverstate")
    result = run_cli("train", "-solver", solver, "-snapshot", state, *device)
    assert result.code == 0, result.err
    messages = result.messages
    # caffe.cpp's order: restore, then start optimising
    assert messages.index(f"Resuming from {state}") < messages.index("Starting Optimization")
    assert iterations_logged(messages) == [2, 3]
    assert open(snap(tmp_path, 4), "rb").read() == first  # exact resume


# --- user errors ---------------------------------------------------------------------------
def test_missing_solver_file(run_cli, tmp_path):
    missing = str(tmp_path / "nope.prototxt")
    result = run_cli("train", "-solver", missing)
    assert result.code == 1
    [line] = result.error_lines()
    assert missing in line
    assert "Traceback" not in result.err


def test_solver_syntax_error(run_cli, write):
    solver = write("bad_solver.prototxt", 'net: "x.prototxt"\nbase_lr 0.1\nmax_iter: 3\n')
    result = run_cli("train", "-solver", solver)
    assert result.code == 1
    [line] = result.error_lines()
    assert line.startswith(f"pycaffe: error: {solver}:2:"), line
    assert "Traceback" not in result.err


def test_weights_file_missing(run_cli, make_solver, tmp_path):
    missing = str(tmp_path / "nope.caffemodel")
    result = run_cli("train", "-solver", make_solver(), "-weights", missing)
    assert result.code == 1
    [line] = result.error_lines()
    assert missing in line


@pytest.mark.parametrize("cuda", [pytest.param(False, id="no_cuda"),
                                  pytest.param(True, id="cuda", marks=pytest.mark.gpu)])
def test_solver_mode_gpu_and_the_gpu_flag(run_cli, make_solver, request, cuda):
    """solver_mode: GPU runs on its device where numba sees one, and on the CPU with one
    warning where it sees none; a -gpu flag wins over solver_mode, and asking it for a device
    that is not there fails cleanly."""
    if not cuda:
        request.getfixturevalue("no_cuda")
    solver = make_solver(**QUICK, solver_mode="GPU", device_id=0 if cuda else 1)
    result = run_cli("train", "-solver", solver)
    assert result.code == 0, result.err
    if cuda:
        assert "Using GPUs 0" in result.messages
        flagged = run_cli("train", "-solver", solver, "-gpu", "3")
        assert flagged.code == 1
        assert "GPU 3 requested but this machine has 1 CUDA device" in flagged.err
        return
    warnings = [line for line in result.err.splitlines() if line.startswith("W")]
    assert len(warnings) == 1
    assert warnings[0].endswith("] solver_mode is GPU but no CUDA device is available; "
                                "running on CPU")
    assert "Use CPU." in result.messages
    assert backend.mode() is backend.Mode.CPU
    flagged = run_cli("train", "-solver", make_solver(), "-gpu", "0")
    assert flagged.code == 1
    [line] = flagged.error_lines()
    assert "no CUDA device is available" in line
    assert "Traceback" not in flagged.err


@pytest.mark.gpu
def test_a_cuda_target_that_cannot_compile_is_one_clear_error(run_cli, make_solver, monkeypatch):
    """numba-cuda built for another numpy fails at its first kernel compile (numpy 2.5 removed
    np.row_stack, which numba-cuda 0.30 registers); --gpu checks once, up front, and names
    the versions instead of a traceback from deep inside a net's first layer."""
    from pycaffe_cli.cuda import fill

    def broken(out, value):
        raise AttributeError("module 'numpy' has no attribute 'row_stack'")
    monkeypatch.setattr(fill, "fill", broken)
    monkeypatch.setitem(backend._state, "compiles", set())
    result = run_cli("train", "-solver", make_solver(**QUICK), "-gpu", "0")
    assert result.code == 1
    [line] = result.error_lines()
    assert "GPU 0: numba's CUDA target cannot compile and run a kernel here (AttributeError: " \
        "module 'numpy' has no attribute 'row_stack'); numba " in line
    assert "Traceback" not in result.err


def _losses(result):
    return [float(m.rsplit("= ", 1)[1]) for m in result.messages
            if re.match(r"Iteration \d+ \(.*\), loss = ", m)]


# --- signals -------------------------------------------------------------------------------
@pytest.fixture
def signal_during(monkeypatch):
    """Make the train net's InnerProduct send ``signum`` to this process during its
    ``nth`` forward (1-based), i.e. in the middle of iteration nth - 1."""
    def arrange(signum, nth):
        cls = layer_class("InnerProduct")
        original = cls.forward_cpu
        calls = []

        def forward_cpu(self, bottom, top):
            if self.phase == caffe_pb2.TRAIN:
                calls.append(1)
                if len(calls) == nth:
                    os.kill(os.getpid(), signum)
            return original(self, bottom, top)
        monkeypatch.setattr(cls, "forward_cpu", forward_cpu)
    return arrange


SIGNAL_SOLVER = {"max_iter": 6, "snapshot": 0, **NO_TESTS}


def snapshots(tmp_path):
    return sorted(int(re.search(r"_iter_(\d+)\.", name).group(1))
                  for name in os.listdir(tmp_path / "snap") if name.endswith(".caffemodel"))


def test_sigint_stops_after_the_iteration_and_snapshots(run_cli, make_solver, tmp_path,
                                                        signal_during):
    signal_during(signal.SIGINT, nth=2)  # during iteration 1
    result = run_cli("train", "-solver", make_solver(**SIGNAL_SOLVER))
    assert result.code == 0, result.err
    assert iterations_logged(result.messages) == [0, 1]
    assert "Optimization stopped early." in result.messages
    assert snapshots(tmp_path) == [2]  # snapshot_after_train at the iteration it stopped
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("flags, signum", [
    (["-sigint_effect", "snapshot"], signal.SIGINT),
    ([], signal.SIGHUP),  # SIGHUP snapshots by default
])
def test_signal_snapshots_and_goes_on(run_cli, make_solver, tmp_path, signal_during,
                                      flags, signum):
    signal_during(signum, nth=3)  # during iteration 2
    result = run_cli("train", "-solver", make_solver(**SIGNAL_SOLVER), *flags)
    assert result.code == 0, result.err
    assert iterations_logged(result.messages) == list(range(6))
    assert "Optimization stopped early." not in result.messages
    assert snapshots(tmp_path) == [3, 6]


def test_sigint_effect_none_ignores_ctrl_c(run_cli, make_solver, tmp_path, signal_during):
    signal_during(signal.SIGINT, nth=2)
    result = run_cli("train", "-solver", make_solver(**SIGNAL_SOLVER), "-sigint_effect=none")
    assert result.code == 0, result.err
    assert iterations_logged(result.messages) == list(range(6))
    assert snapshots(tmp_path) == [6]


def test_sighup_effect_stop(run_cli, make_solver, tmp_path, signal_during):
    signal_during(signal.SIGHUP, nth=4)
    result = run_cli("train", "-solver", make_solver(**SIGNAL_SOLVER), "--sighup_effect", "stop")
    assert result.code == 0, result.err
    assert iterations_logged(result.messages) == [0, 1, 2, 3]
    assert snapshots(tmp_path) == [4]


def test_finetune_copies_into_every_test_net(run_cli, make_solver, tmp_path, monkeypatch):
    """Caffe's CopyLayers: each weights file goes into the train net and each test net."""
    from pycaffe_cli.net import weights as net_weights
    copied = []
    monkeypatch.setattr(net_weights, "copy_trained_layers_from",
                        lambda net, path: copied.append((net.phase, path)))
    solver = make_solver(max_iter=0, test_iter=[2, 1], snapshot_after_train="false")
    result = run_cli("train", "-solver", solver, "-weights", "a.caffemodel,b.caffemodel")
    assert result.code == 0, result.err
    train, test = caffe_pb2.TRAIN, caffe_pb2.TEST
    assert copied == [(train, "a.caffemodel"), (test, "a.caffemodel"), (test, "a.caffemodel"),
                      (train, "b.caffemodel"), (test, "b.caffemodel"), (test, "b.caffemodel")]
    assert [m for m in result.messages if m.startswith("Finetuning from")] == [
        "Finetuning from a.caffemodel", "Finetuning from b.caffemodel"]


def test_solver_parameter_errors_name_the_solver_file(run_cli, tmp_path):
    path = tmp_path / "nonet.prototxt"
    path.write_text("base_lr: 0.1\n")
    result = run_cli("train", "-solver", str(path))
    assert result.code == 1
    assert f"{path}: SolverParameter must specify a train net" in result.err
    assert "Traceback" not in result.err
