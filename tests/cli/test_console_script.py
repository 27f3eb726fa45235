"""The installed ``pycaffe`` console script, run as a user runs it (one subprocess test)."""
import os
import subprocess
import sys

from tests.cli.test_cli_score import NET

PYCAFFE = os.path.join(os.path.dirname(sys.executable), "pycaffe")


def test_console_script(tmp_path):
    model = tmp_path / "tiny.prototxt"
    model.write_text(NET)
    ok = subprocess.run([PYCAFFE, "time", "-model", str(model), "-iterations=2"],
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert ok.stdout == ""
    assert "] *** Benchmark ends ***" in ok.stderr.splitlines()[-1]
    assert "Traceback" not in ok.stderr
    # a user's mistake: one line on stderr, status 1
    bad = subprocess.run([PYCAFFE, "test", "-model", str(model)], capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode == 1
    assert bad.stderr == "pycaffe: error: Need model weights to score.\n"


def test_glog_minloglevel_quietens_the_log(run_cli, monkeypatch, tmp_path):
    """As Caffe's binaries read GLOG_minloglevel: 1 drops the INFO lines, not the output."""
    net = tmp_path / "net.prototxt"
    net.write_text('layer { name: "d" type: "DummyData" top: "d" '
                   "dummy_data_param { shape { dim: 1 dim: 2 } } }")
    loud = run_cli("time", "--model", net, "--iterations", "1")
    assert loud.code == 0 and any(line.startswith("I") for line in loud.err.splitlines())
    monkeypatch.setenv("GLOG_minloglevel", "1")
    quiet = run_cli("time", "--model", net, "--iterations", "1")
    assert quiet.code == 0 and not any(line.startswith("I") for line in quiet.err.splitlines())
