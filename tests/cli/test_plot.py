"""``pycaffe plot``: training curves from Caffe's and pycaffe's logs. The figure is checked
in-process (panels, lines, labels, data); the command's image by its PNG header and size."""
import importlib.util
import os
import shutil
import sys

import pytest
from PIL import Image

from pycaffe_cli.commands.parse_log import parse_log
from pycaffe_cli.commands.plot import DPI, NEEDS_MATPLOTLIB, PANEL_HEIGHT_INCHES, WIDTH_INCHES

LOGS = os.path.join(os.path.dirname(__file__), "logs")
CAFFE_LOG = os.path.join(LOGS, "caffe_lenet.log")
PYCAFFE_LOG = os.path.join(LOGS, "pycaffe_mlp.log")

needs_matplotlib = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                      reason="matplotlib is not installed (pycaffe[plot])")


def draw(*paths, x="iterations"):
    from pycaffe_cli.commands.plot import draw as draw_figure
    return draw_figure([parse_log(path) for path in paths], x)


def panels(figure):
    """{y label: {line label: (xs, ys)}} for every panel of ``figure``."""
    return {axes.get_ylabel(): {line.get_label(): (list(line.get_xdata()),
                                                   list(line.get_ydata()))
                                for line in axes.get_lines()}
            for axes in figure.get_axes()}


def image_size(panel_count):
    return int(WIDTH_INCHES * DPI), int(PANEL_HEIGHT_INCHES * DPI * panel_count)


@needs_matplotlib
def test_caffe_and_pycaffe_logs_on_one_figure():
    figure = draw(CAFFE_LOG, PYCAFFE_LOG)
    drawn = panels(figure)
    assert list(drawn) == ["loss", "accuracy", "learning rate"]
    assert sorted(drawn["loss"]) == sorted([
        "caffe_lenet.log train loss", "caffe_lenet.log test loss",
        "pycaffe_mlp.log train loss", "pycaffe_mlp.log test loss"])
    assert sorted(drawn["accuracy"]) == ["caffe_lenet.log test accuracy",
                                         "pycaffe_mlp.log test accuracy"]
    assert sorted(drawn["learning rate"]) == ["caffe_lenet.log", "pycaffe_mlp.log"]
    assert drawn["loss"]["caffe_lenet.log train loss"] == (
        [0, 100, 200, 300, 400], [2.35237, 0.197427, 0.135, 0.0912, 0.0815])
    assert drawn["accuracy"]["caffe_lenet.log test accuracy"] == (
        [0, 200, 400, 500], [0.0924, 0.9612, 0.9709, 0.9722])
    assert drawn["learning rate"]["pycaffe_mlp.log"] == (
        [0, 50, 100, 150, 200, 250], [0.05, 0.05, 0.05, 0.025, 0.025, 0.0125])
    assert {axes.get_xlabel() for axes in figure.get_axes()} == {"Iterations"}


@needs_matplotlib
def test_against_seconds():
    figure = draw(CAFFE_LOG, x="seconds")
    drawn = panels(figure)
    assert drawn["loss"]["caffe_lenet.log test loss"] == (
        [0.080626, 0.61318, 1.145385, 1.464098], [2.3651, 0.1264, 0.0901, 0.0871])
    assert {axes.get_xlabel() for axes in figure.get_axes()} == {"Seconds"}


@needs_matplotlib
def test_logs_with_one_file_name_are_told_apart_by_path(tmp_path):
    for run in ("run1", "run2"):
        (tmp_path / run).mkdir()
        shutil.copy(CAFFE_LOG, tmp_path / run / "caffe.INFO")
    first, second = (str(tmp_path / run / "caffe.INFO") for run in ("run1", "run2"))
    assert sorted(panels(draw(first, second))["learning rate"]) == [first, second]


@needs_matplotlib
@pytest.mark.parametrize("flags, logs, panel_count", [
    ((), (CAFFE_LOG, PYCAFFE_LOG), 3),
    (("--x", "seconds"), (PYCAFFE_LOG,), 3)])
def test_command_writes_a_png(run_cli, tmp_path, flags, logs, panel_count):
    out = tmp_path / "curves.png"
    result = run_cli("plot", *flags, *logs, out)
    assert result.code == 0, result.err
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(out) as image:
        assert image.format == "PNG"
        assert image.size == image_size(panel_count)
        image.verify()
    assert os.listdir(tmp_path) == ["curves.png"]


@needs_matplotlib
def test_a_log_of_training_outputs_only_gives_two_panels(run_cli, tmp_path):
    log = tmp_path / "train_only.log"
    log.write_text("".join(line for line in open(CAFFE_LOG) if "Test net output" not in line))
    out = tmp_path / "curves.png"
    assert run_cli("plot", log, out).code == 0
    with Image.open(out) as image:
        assert image.size == image_size(2)
    assert list(panels(draw(str(log)))) == ["loss", "learning rate"]


@needs_matplotlib
@pytest.mark.parametrize("arguments, problem", [
    (("train.log", "other.log"), "OUT 'other.log': not an image file name"),
    (("train.log", "curves"), "OUT 'curves': not an image file name"),
    (("absent.log", "curves.png"), "cannot read log file 'absent.log'"),
    (("empty.log", "curves.png"), "no 'Train net output' or 'Test net output' lines in"),
    (("train.log", "no_folder/curves.png"), "cannot write 'no_folder/curves.png'"),
])
def test_mistakes_end_with_one_line_and_no_file(run_cli, tmp_path, monkeypatch, arguments,
                                                problem):
    shutil.copy(CAFFE_LOG, tmp_path / "train.log")
    shutil.copy(CAFFE_LOG, tmp_path / "other.log")
    (tmp_path / "empty.log").write_text("")
    monkeypatch.chdir(tmp_path)
    result = run_cli("plot", *arguments)
    assert result.code == 1
    [line] = result.error_lines()
    assert problem in line
    assert sorted(os.listdir(tmp_path)) == ["empty.log", "other.log", "train.log"]
    assert (tmp_path / "other.log").read_bytes() == (tmp_path / "train.log").read_bytes()


def test_without_matplotlib_one_line_says_how_to_get_it(run_cli, tmp_path, monkeypatch):
    for module in ("matplotlib", "matplotlib.figure", "matplotlib.backends",
                   "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, module, None)   # import raises ImportError
    result = run_cli("plot", CAFFE_LOG, tmp_path / "curves.png")
    assert result.code == 1
    assert result.error_lines() == [f"pycaffe: error: {NEEDS_MATPLOTLIB}"]
    assert os.listdir(tmp_path) == []


def test_plot_is_listed_and_needs_a_log_and_an_image(run_cli):
    listed = [line.split()[0] for line in run_cli("--help").out.splitlines()
              if line.startswith("  ")]
    assert "plot" in listed and "parse_log" in listed
    result = run_cli("plot", CAFFE_LOG)
    assert result.code == 2
    assert result.error_lines() == [
        "pycaffe: error: give at least one LOG and the OUT image file"]
