"""scripts/detect.py: windows from a .csv (or Selective Search for a .txt list), the
detections saved as .csv or HDF5, and one-line errors."""
import csv
import sys
import types

import h5py
import numpy as np
import pytest

from caffe.detector import Detector
from tests.caffe_api.image_nets import CLASSES, TinyModel, save_png
from tests.numerics import close_to
from tests.scripts.loading import load_script

MEAN = np.array([100.0, 110.0, 120.0])

detect = load_script("detect")


@pytest.fixture
def setup(tmp_path):
    """A tiny model, a 3 x 9 x 9 mean, two PNGs and a .csv of three windows."""
    model = TinyModel(tmp_path)
    np.save(tmp_path / "mean.npy", np.broadcast_to(MEAN[:, None, None], (3, 9, 9)))
    rng = np.random.default_rng(4)
    a = save_png(tmp_path / "a.png", rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))
    b = save_png(tmp_path / "b.png", rng.integers(0, 256, (6, 9, 3), dtype=np.uint8))
    windows = [(a, [0, 0, 4, 4]), (b, [1, 2, 5, 8]), (a, [2, 3, 7, 8])]
    with open(tmp_path / "windows.csv", "w") as stream:
        stream.write("filename, xmin, ymin, xmax, ymax\n")  # any column order, BVLC's header
        for name, (ymin, xmin, ymax, xmax) in windows:
            stream.write(f"{name}, {xmin}, {ymin}, {xmax}, {ymax}\n")
    return tmp_path, model, a, b


def flags(tmp_path, model, *extra):
    return ["--model_def", model.model_file, "--pretrained_model", model.weights_file,
            "--mean_file", str(tmp_path / "mean.npy"), "--context_pad", "1", *extra]


def reference(model, a, b):
    """The same windows through the Detector API, grouped by file in first-seen order."""
    detector = Detector(model.model_file, model.weights_file, mean=MEAN, raw_scale=255.0,
                        channel_swap=[2, 1, 0], context_pad=1)
    return detector.detect_windows([(a, [np.array([0, 0, 4, 4]), np.array([2, 3, 7, 8])]),
                                    (b, [np.array([1, 2, 5, 8])])])


def test_list_mode_to_csv(setup, capsys):
    tmp_path, model, a, b = setup
    out = tmp_path / "out.csv"
    code = detect.main([str(tmp_path / "windows.csv"), str(out), "--crop_mode", "list",
                        *flags(tmp_path, model)])
    assert code == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[:2] == ["CPU mode", "Loading input..."]
    assert printed[2].startswith("Processed 3 windows in ")
    assert printed[3].startswith(f"Saved to {out} in ")
    with open(out) as stream:
        rows = list(csv.reader(stream))
    assert rows[0] == ["filename", "ymin", "xmin", "ymax", "xmax"] + [
        f"class{i}" for i in range(CLASSES)]
    expected = reference(model, a, b)
    assert [row[:5] for row in rows[1:]] == [
        [d["filename"]] + [str(v) for v in d["window"]] for d in expected]
    for row, detection in zip(rows[1:], expected):
        close_to([float(v) for v in row[5:]], detection["prediction"], rtol=1e-6)


def test_list_mode_to_hdf5(setup):
    tmp_path, model, a, b = setup
    out = tmp_path / "out.h5"
    code = detect.main([str(tmp_path / "windows.csv"), str(out), "--crop_mode", "list",
                        *flags(tmp_path, model)])
    assert code == 0
    expected = reference(model, a, b)
    with h5py.File(out, "r") as h5:
        assert [n.decode() for n in h5["filename"][:]] == [d["filename"] for d in expected]
        np.testing.assert_array_equal(h5["window"][:], [d["window"] for d in expected])
        assert list(h5["window"].attrs["columns"]) == ["ymin", "xmin", "ymax", "xmax"]
        close_to(h5["prediction"][:], [d["prediction"] for d in expected], rtol=1e-6)


def test_selective_search_on_a_txt_list(setup, monkeypatch):
    tmp_path, model, a, b = setup
    module = types.ModuleType("selective_search_ijcv_with_python")
    module.get_windows = lambda names, cmd: [np.array([[0, 0, 4, 4]]) for _ in names]
    monkeypatch.setitem(sys.modules, "selective_search_ijcv_with_python", module)
    (tmp_path / "images.txt").write_text(f"{a}\n\n{b}\n")
    out = tmp_path / "out.csv"
    assert detect.main([str(tmp_path / "images.txt"), str(out), *flags(tmp_path, model)]) == 0
    with open(out) as stream:
        rows = list(csv.reader(stream))[1:]
    assert [row[:5] for row in rows] == [[a, "0", "0", "4", "4"], [b, "0", "0", "4", "4"]]


def run_error(capsys, argv):
    code = detect.main(argv)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("detect.py: error:")]
    assert code == 1 and len(errors) == 1, err
    return errors[0]


def test_selective_search_module_missing(setup, capsys, monkeypatch):
    tmp_path, model, a, _ = setup
    monkeypatch.setitem(sys.modules, "selective_search_ijcv_with_python", None)
    (tmp_path / "images.txt").write_text(f"{a}\n")
    error = run_error(capsys, [str(tmp_path / "images.txt"), str(tmp_path / "o.csv"),
                               *flags(tmp_path, model)])
    assert "needs the selective_search_ijcv_with_python module" in error


@pytest.mark.parametrize("input_name, extra, message", [
    ("windows.json", [], "unknown input file type: not in txt or csv"),
    ("images.txt", ["--crop_mode", "list"], "--crop_mode list needs a .csv input_file"),
    ("windows.csv", ["--mean_file", "nope.npy"], "--mean_file: nope.npy not found"),
    ("missing.csv", ["--crop_mode", "list"], "input_file:"),
    ("bad.csv", ["--crop_mode", "list"], "has no column(s) ymax"),
])
def test_errors(setup, capsys, input_name, extra, message):
    tmp_path, model, a, _ = setup
    (tmp_path / "windows.json").write_text("{}")
    (tmp_path / "images.txt").write_text(f"{a}\n")
    (tmp_path / "bad.csv").write_text("filename,ymin,xmin,xmax\n")
    error = run_error(capsys, [str(tmp_path / input_name), str(tmp_path / "o.csv"),
                               *flags(tmp_path, model), *extra])
    assert message in error
    assert not (tmp_path / "o.csv").exists()
