"""scripts/classify.py: BVLC's flags, its inputs (image, folder, .npy), the saved
predictions, and one-line errors."""
import numpy as np
import pytest

from caffe import io as caffe_io
from tests.caffe_api.image_nets import CLASSES, TinyModel, preprocess, save_png, ten_crops
from tests.scripts.loading import load_script

MEAN = np.array([100.0, 110.0, 120.0])

classify = load_script("classify")


@pytest.fixture
def setup(tmp_path):
    """A tiny 4x4-input model, a K x H x W mean file, and two 6 x 6 PNG images."""
    model = TinyModel(tmp_path)
    np.save(tmp_path / "mean.npy", np.broadcast_to(MEAN[:, None, None], (3, 4, 4)))
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(5)
    pixels = {}
    for name in ("b.png", "a.png"):
        pixels[name] = rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)
        save_png(folder / name, pixels[name])
    (folder / "skip.txt").write_text("not an image")
    return tmp_path, model, folder, pixels


def flags(tmp_path, model, *extra):
    return ["--model_def", model.model_file, "--pretrained_model", model.weights_file,
            "--images_dim", "6,6", "--mean_file", str(tmp_path / "mean.npy"), "--ext", "png",
            *extra]


def expected(model, rgb_bytes, center_only=False):
    """BVLC's defaults: raw scale 255, RGB -> BGR, mean subtracted; ten crops averaged."""
    image = rgb_bytes.astype(np.float64) / 255
    crops = [image[1:5, 1:5]] if center_only else ten_crops(image, 4, 4)
    caffe_in = np.stack([preprocess(c, (2, 1, 0), 255.0, MEAN) for c in crops])
    return model.probabilities(caffe_in).mean(axis=0)


def test_folder_of_images(setup, capsys):
    tmp_path, model, folder, pixels = setup
    out = tmp_path / "out.npy"
    assert classify.main([str(folder), str(out), *flags(tmp_path, model)]) == 0
    predictions = np.load(out)
    assert predictions.shape == (2, CLASSES)
    # the folder's *.png in name order: a.png, then b.png
    for row, name in zip(predictions, ["a.png", "b.png"]):
        np.testing.assert_allclose(row, expected(model, pixels[name]), rtol=1e-4, atol=1e-6)
    printed = capsys.readouterr().out.splitlines()
    assert printed[:3] == ["CPU mode", f"Loading folder: {folder}", "Classifying 2 inputs."]
    assert printed[3].startswith("Done in ") and printed[3].endswith(" s.")
    assert printed[4] == f"Saving results into {out}"


def test_one_image_center_only_and_npy_suffix(setup):
    tmp_path, model, folder, pixels = setup
    out = tmp_path / "single"
    code = classify.main([str(folder / "b.png"), str(out), "--center_only",
                          *flags(tmp_path, model)])
    assert code == 0
    predictions = np.load(str(out) + ".npy")  # np.save's naming
    np.testing.assert_allclose(predictions[0], expected(model, pixels["b.png"], True),
                               rtol=1e-4, atol=1e-6)


def test_npy_input_and_no_mean_no_swap(setup):
    tmp_path, model, _, _ = setup
    images = np.random.default_rng(2).random((3, 4, 4, 3)).astype(np.float32)
    np.save(tmp_path / "inputs.npy", images)
    out = tmp_path / "out.npy"
    code = classify.main([str(tmp_path / "inputs.npy"), str(out), *flags(tmp_path, model),
                          "--images_dim", "4,4", "--mean_file", "", "--channel_swap", "",
                          "--raw_scale", "2", "--input_scale", "0.5", "--center_only"])
    assert code == 0
    caffe_in = np.stack([preprocess(im, None, 2.0, None, 0.5) for im in images])
    np.testing.assert_allclose(np.load(out), model.probabilities(caffe_in), rtol=1e-4,
                               atol=1e-6)


def test_mean_of_another_size_is_resized(setup):
    """BVLC's ImageNet mean is 3 x 256 x 256 for 227 x 227 crops: the Transformer resizes it
    to the input's size."""
    tmp_path, model, folder, pixels = setup
    big = np.random.default_rng(8).uniform(90, 130, (3, 9, 9))
    np.save(tmp_path / "big_mean.npy", big)
    out = tmp_path / "out.npy"
    code = classify.main([str(folder / "a.png"), str(out), *flags(tmp_path, model),
                          "--mean_file", str(tmp_path / "big_mean.npy")])
    assert code == 0
    transformer = caffe_io.Transformer({"data": (4, 3, 4, 4)})
    transformer.set_mean("data", big)
    mean = transformer.mean["data"]
    assert mean.shape == (3, 4, 4)
    image = pixels["a.png"].astype(np.float64) / 255
    caffe_in = np.stack([preprocess(c, (2, 1, 0), 255.0, mean)
                         for c in ten_crops(image, 4, 4)])
    np.testing.assert_allclose(np.load(out)[0], model.probabilities(caffe_in).mean(axis=0),
                               rtol=1e-4, atol=1e-6)


def run_error(capsys, argv):
    code = classify.main(argv)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("classify.py: error:")]
    assert code == 1 and len(errors) == 1, err
    return errors[0]


def test_default_mean_is_not_shipped(setup, capsys):
    tmp_path, model, folder, _ = setup
    argv = [str(folder), str(tmp_path / "out.npy"), "--model_def", model.model_file,
            "--pretrained_model", model.weights_file]
    error = run_error(capsys, argv)
    assert "ilsvrc_2012_mean.npy not found" in error
    assert "pass --mean_file '' for no mean or your own .npy" in error
    assert not (tmp_path / "out.npy").exists()


def test_default_weights_are_not_shipped(setup, capsys):
    tmp_path, _, folder, _ = setup
    error = run_error(capsys, [str(folder), str(tmp_path / "o.npy"), "--mean_file", ""])
    assert "--pretrained_model:" in error and "bvlc_reference_caffenet.caffemodel" in error


@pytest.mark.parametrize("extra, message", [
    (["--images_dim", "256"], "--images_dim: expected 'height,width', got '256'"),
    (["--channel_swap", "2,x,0"], "--channel_swap: expected comma-separated integers"),
    (["--ext", "jpg"], "no *.jpg images in folder"),
    (["--mean_file", "nope.npy"], "--mean_file: nope.npy not found"),
    (["--model_def", "nope.prototxt"], "--model_def: nope.prototxt not found"),
])
def test_argument_errors(setup, capsys, extra, message):
    tmp_path, model, folder, _ = setup
    error = run_error(capsys, [str(folder), str(tmp_path / "o.npy"),
                               *flags(tmp_path, model), *extra])
    assert message in error


def test_missing_input_file(setup, capsys):
    tmp_path, model, _, _ = setup
    error = run_error(capsys, [str(tmp_path / "none.png"), str(tmp_path / "o.npy"),
                               *flags(tmp_path, model)])
    assert "input_file:" in error and "none.png not found" in error
