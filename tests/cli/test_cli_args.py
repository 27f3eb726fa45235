"""The command line itself: gflags spellings, usage text, Caffe's flag checks, error exits."""
import pytest

from pycaffe_cli import backend
from pycaffe_cli.cli import normalize_argv
from pycaffe_cli.commands import device_query as device_query_module
from pycaffe_cli.commands import test as test_module

no_cuda = pytest.mark.usefixtures("no_cuda")


# --- gflags spellings --------------------------------------------------------------------
@pytest.mark.parametrize("argv, expected", [
    (["train", "-solver", "s.prototxt"], ["train", "--solver", "s.prototxt"]),
    (["train", "-solver=s.prototxt"], ["train", "--solver=s.prototxt"]),
    (["train", "--solver=s.prototxt"], ["train", "--solver=s.prototxt"]),
    (["train", "--solver", "s.prototxt"], ["train", "--solver", "s.prototxt"]),
    (["test", "-model", "m", "-weights=w", "--iterations=3", "-gpu", "0"],
     ["test", "--model", "m", "--weights=w", "--iterations=3", "--gpu", "0"]),
    (["time", "-phase=TEST", "-level", "-1", "-stage", "a,b"],
     ["time", "--phase=TEST", "--level", "-1", "--stage", "a,b"]),
    (["train", "-sigint_effect", "none", "-sighup_effect=stop"],
     ["train", "--sigint_effect", "none", "--sighup_effect=stop"]),
    (["-help"], ["--help"]),
    (["train", "-h"], ["train", "-h"]),
    # the command word may come after flags, as gflags allows
    (["-solver", "train", "train"], ["train", "--solver", "train"]),
    (["--model=m", "time", "-iterations", "2"], ["time", "--model=m", "--iterations", "2"]),
    # unknown single-dash words too, so that click names them whole; numbers stay
    (["train", "-solvr", "x"], ["train", "--solvr", "x"]),
    (["test", "-level", "-10", "-h"], ["test", "--level", "-10", "-h"]),
    (["train", "--", "-solver"], ["train", "--", "-solver"]),
])
def test_normalize_argv(argv, expected):
    assert normalize_argv(argv) == expected


@pytest.mark.parametrize("spelling", [
    ["-model", "MISSING.prototxt"], ["-model=MISSING.prototxt"],
    ["--model=MISSING.prototxt"], ["--model", "MISSING.prototxt"]])
def test_every_spelling_reaches_the_command(run_cli, spelling):
    # --model is taken, so the next check (weights) is the one that fails
    result = run_cli("test", *spelling)
    assert result.code == 1
    assert result.error_lines() == ["pycaffe: error: Need model weights to score."]


@pytest.mark.parametrize("spelling", [
    ["-iterations", "0"], ["-iterations=0"], ["--iterations=0"], ["--iterations", "0"]])
def test_every_spelling_of_an_int_flag(run_cli, spelling):
    result = run_cli("test", "-model", "m", "-weights", "w", *spelling)
    assert result.code == 2
    assert "--iterations" in result.err and "0 is not in the range" in result.err


def test_command_after_flags(run_cli):
    result = run_cli("-weights", "w.caffemodel", "test")
    assert result.error_lines() == ["pycaffe: error: Need a model definition to score."]


# --- usage -------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [[], ["--help"], ["-help"], ["-h"]])
def test_usage_lists_the_commands(run_cli, argv):
    result = run_cli(*argv)
    assert result.code == 0
    assert "usage: pycaffe <command> <args>" in result.out
    for command, summary in [("train", "train or finetune a model"), ("test", "score a model"),
                             ("device_query", "show GPU diagnostic information"),
                             ("time", "benchmark model execution time")]:
        assert f"  {command:<15} {summary}" in result.out


@pytest.mark.parametrize("command, flags", [
    ("train", ["--solver", "--weights", "--snapshot", "--gpu", "--level", "--stage",
               "--sigint_effect", "--sighup_effect"]),
    ("test", ["--model", "--weights", "--iterations", "--gpu", "--level", "--stage",
              "--inference_plan", "--noinference_plan", "--ap_version"]),
    ("time", ["--model", "--iterations", "--phase", "--batch", "--gpu", "--level", "--stage",
              "--inference_plan", "--noinference_plan"]),
    ("device_query", ["--gpu"]),
])
def test_command_help_shows_its_flags_only(run_cli, command, flags):
    result = run_cli(command, "--help")
    assert result.code == 0
    shown = {word for word in result.out.split() if word.startswith("--")}
    assert shown == set(flags) | {"--help", "--threads"}


def test_unknown_command(run_cli):
    result = run_cli("tain")
    assert result.code == 2
    assert result.error_lines() == [
        'pycaffe: error: unknown action "tain" (did you mean train?); available actions: '
        "train, test, device_query, time"]
    assert "Traceback" not in result.err


def test_unknown_flag_is_a_usage_error(run_cli):
    result = run_cli("train", "-solvr", "x")
    assert result.code == 2
    assert len(result.err.splitlines()) <= 2
    assert result.err.startswith("pycaffe: error: No such option '--solvr'. Did you mean "
                                 "'--solver'?")


# --- Caffe's checks ------------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["train"], "Need a solver definition to train."),
    (["train", "-weights", "w.caffemodel"], "Need a solver definition to train."),
    (["train", "-solver", "s", "-weights", "w", "-snapshot", "x.solverstate"],
     "Give a snapshot to resume training or weights to finetune but not both."),
    (["test"], "Need a model definition to score."),
    (["test", "-model", "m.prototxt"], "Need model weights to score."),
    (["time"], "Need a model definition to time."),
    (["time", "-model="], "Need a model definition to time."),
])
def test_caffe_checks(run_cli, argv, message):
    result = run_cli(*argv)
    assert result.code == 1
    assert result.err.splitlines() == [f"pycaffe: error: {message}"]


@pytest.mark.parametrize("argv, words", [
    (["time", "-model", "m", "-phase", "VAL"], ["--phase", "'VAL' is not one of", "TRAIN"]),
    (["train", "-solver", "s", "-sigint_effect", "kill"],
     ["--sigint_effect", "'kill' is not one of", "snapshot", "stop", "none"]),
    (["train", "-solver", "s", "-sighup_effect=ignore"], ["--sighup_effect", "'ignore'"]),
    (["test", "-model", "m", "-weights", "w", "-level", "high"], ["--level", "'high'"]),
])
def test_bad_flag_values(run_cli, argv, words):
    result = run_cli(*argv)
    assert result.code == 2
    lines = result.err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("pycaffe: error: Invalid value for")
    assert lines[1] == f"Try 'pycaffe {argv[0]} --help' for help."
    for word in words:
        assert word in lines[0]


# --- GPU ---------------------------------------------------------------------------------
def test_bad_gpu_id(run_cli):
    result = run_cli("time", "-model", "m", "-gpu", "first")
    assert result.code == 1
    assert result.error_lines() == ['pycaffe: error: --gpu: "first" is not a device id '
                                    '(give device ids separated by "," or "all")']


@no_cuda
@pytest.mark.parametrize("argv", [
    command + ["-gpu", gpu]
    for command in (["test", "-model", "m", "-weights", "w"], ["time", "-model", "m"])
    for gpu in ("0", "all", "0,1")] + [["device_query"], ["device_query", "-gpu", "0"]])
def test_device_commands_without_cuda(run_cli, argv):
    """A command asking for a GPU where numba sees none: exit 1, one error line saying so,
    no traceback."""
    result = run_cli(*argv)
    assert result.code == 1
    [line] = result.error_lines()
    assert "no CUDA device is available" in line
    if argv[0] == "device_query":
        assert line == ("pycaffe: error: device_query: no CUDA device is available "
                        "(numba.cuda sees none)")
    assert "Traceback" not in result.err


FAKE_DEVICE = {
    "id": 0, "major": 9, "minor": 0, "name": "NVIDIA H100", "total_memory": 85029158912,
    "shared_per_block": 49152, "registers_per_block": 65536, "warp_size": 32,
    "memory_pitch": 2147483647, "threads_per_block": 1024, "block_dims": [1024, 1024, 64],
    "grid_dims": [2147483647, 65535, 65535], "clock_rate": 1980000, "constant_memory": 65536,
    "texture_alignment": 512, "concurrent_copy": 1, "multiprocessors": 132,
    "kernel_timeout": 0}


def test_device_query_wording():
    lines = device_query_module.describe_device(FAKE_DEVICE)
    assert lines[:4] == ["Device id:                     0",
                         "Major revision number:         9",
                         "Minor revision number:         0",
                         "Name:                          NVIDIA H100"]
    assert "Maximum dimension of block:    1024, 1024, 64" in lines
    assert "Maximum dimension of grid:     2147483647, 65535, 65535" in lines
    assert "Concurrent copy and execution: Yes" in lines
    assert lines[-2:] == ["Number of multiprocessors:     132",
                          "Kernel execution timeout:      No"]


@pytest.mark.parametrize("argv, queried", [([], [0, 1]), (["-gpu", "1"], [1]),
                                           (["-gpu=0,1"], [0, 1])])
def test_device_query_command(run_cli, monkeypatch, argv, queried):
    """The command's glue, with numba.cuda replaced by two fake devices."""
    monkeypatch.setattr(backend, "cuda_available", lambda: True)
    monkeypatch.setattr(device_query_module, "cuda_device_count", lambda: 2)

    def properties(i):
        return dict.fromkeys(FAKE_DEVICE, 0) | {"id": i, "name": "fake", "block_dims": [1, 2, 3],
                                                "grid_dims": [4, 5, 6]}
    monkeypatch.setattr(device_query_module, "device_properties", properties)
    result = run_cli("device_query", *argv)
    assert result.code == 0, result.err
    assert [m for m in result.messages if m.startswith("Device id:")] == [
        f"Device id:                     {i}" for i in queried]
    assert result.messages.count("Name:                          fake") == len(queried)
    more = run_cli("device_query", "-gpu", "2")
    assert more.code == 1
    assert more.error_lines() == ["pycaffe: error: device_query: no CUDA device 2 (this "
                                  "machine has 2)"]


@pytest.mark.skipif(not backend.cuda_available(), reason="needs a CUDA device")
def test_device_query_on_a_gpu(run_cli):
    result = run_cli("device_query", "-gpu", "0")
    assert result.code == 0
    assert "Device id:                     0" in result.messages
    assert any(m.startswith("Number of multiprocessors:     ") for m in result.messages)


# --- flags a command does not use ----------------------------------------------------------
@no_cuda
def test_unused_flags_are_accepted_with_a_warning(run_cli):
    result = run_cli("device_query", "-solver", "s.prototxt", "-iterations", "7")
    assert "--solver is not used by 'device_query'; ignored" in result.messages
    assert "--iterations is not used by 'device_query'; ignored" in result.messages
    assert result.err.splitlines()[0].startswith("W")


# --- exits ---------------------------------------------------------------------------------
def test_keyboard_interrupt_outside_training(run_cli, monkeypatch):
    def interrupted(gpu):
        raise KeyboardInterrupt
    monkeypatch.setattr(test_module, "use_single_device", interrupted)
    result = run_cli("test", "-model", "m", "-weights", "w")
    assert result.code == 130
    assert result.err.splitlines() == ["pycaffe: error: interrupted"]


def test_multi_line_user_errors_become_one_line(run_cli, monkeypatch):
    from pycaffe_cli.errors import CaffeError

    def fails(gpu):
        raise CaffeError("first\nsecond")
    monkeypatch.setattr(test_module, "use_single_device", fails)
    result = run_cli("test", "-model", "m", "-weights", "w")
    assert result.code == 1
    assert result.err.splitlines() == ["pycaffe: error: first second"]


def test_bugs_keep_their_traceback(run_cli, monkeypatch):
    def bug(gpu):
        raise ZeroDivisionError("a bug")
    monkeypatch.setattr(test_module, "use_single_device", bug)
    with pytest.raises(ZeroDivisionError):
        run_cli("test", "-model", "m", "-weights", "w")
