"""WindowData layer: fg/bg sampling, warping, Caffe's context padding and square mode, mean
centring, mirroring, exact resume and the user errors (a tiny window file over 2 images)."""
import json

import numpy as np
import pytest
from PIL import Image

from pycaffe_cli import backend
from pycaffe_cli.data.linear_resize import resize_linear
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.blob_proto import fill_blob_proto
from pycaffe_cli.io.prototxt import write_blob_proto
from pycaffe_cli.proto import caffe_pb2
from tests.layer_helpers import set_up

TEST = caffe_pb2.TEST


@pytest.fixture
def pictures(tmp_path):
    """Image 0 is 20x20, image 1 is 16x24 (height x width); returns folder and BGR pixels."""
    rng = np.random.default_rng(0)
    rgbs = [rng.integers(0, 256, (20, 20, 3), dtype=np.uint8),
            rng.integers(0, 256, (16, 24, 3), dtype=np.uint8)]
    for i, rgb in enumerate(rgbs):
        Image.fromarray(rgb).save(tmp_path / f"im{i}.png")
    return tmp_path, [np.ascontiguousarray(rgb[:, :, ::-1].transpose(2, 0, 1)) for rgb in rgbs]


def window_file(folder, windows_0, windows_1):
    """windows_k: lines "class overlap x1 y1 x2 y2" for image k."""
    text = ""
    for index, (size, windows) in enumerate(((("20 20"), windows_0), ("16 24", windows_1))):
        text += f"# {index}\nim{index}.png\n3 {size}\n{len(windows)}\n"
        text += "".join(f"{w}\n" for w in windows)
    (folder / "windows.txt").write_text(text)


def window_data(folder, batch=4, param="", transform="crop_size: 6", phase=TEST):
    text = (f'name: "win" type: "WindowData" top: "data" top: "label" window_data_param {{ '
            f'source: "{folder / "windows.txt"}" root_folder: "{folder}/" batch_size: {batch} '
            f'{param} }} transform_param {{ {transform} }}')
    return set_up(text, [], 2, phase)


def test_warp_batches_bg_then_fg(pictures):
    folder, bgr = pictures
    window_file(folder, ["4 0.1 0 0 9 4", "7 0.4 1 1 3 3"], ["3 0.9 3 2 12 9"])
    layer, bottom, top = window_data(folder, param="fg_fraction: 0.5 bg_threshold: 0.3",
                                     transform="crop_size: 6 mean_value: 100")
    assert top[0].shape == (4, 3, 6, 6) and top[1].shape == (4,)
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[1].data, [0, 0, 3, 3])  # 0.4 is neither fg nor bg
    background = resize_linear(bgr[0][:, 0:5, 0:10], 6, 6).astype(np.float32) - 100
    foreground = resize_linear(bgr[1][:, 2:10, 3:13], 6, 6).astype(np.float32) - 100
    for i, expected in enumerate([background, background, foreground, foreground]):
        np.testing.assert_array_equal(top[0].data[i], expected)


def test_context_padding_at_the_corner_and_its_mirror(pictures):
    folder, bgr = pictures
    window_file(folder, ["1 0.9 0 0 9 9"], [])
    # crop 8, pad 2: grown box (-5..15) is clipped to 0..15, warped to 6x6 at offset (2, 2);
    # mirrored, the padding moves to the other side: columns 0..5.
    layer, bottom, top = window_data(folder, batch=16, param="fg_fraction: 1 context_pad: 2",
                                     transform="crop_size: 8 mirror: true")
    layer.forward(bottom, top)
    warped = resize_linear(bgr[0][:, 0:16, 0:16], 6, 6).astype(np.float32)
    plain = np.zeros((3, 8, 8), np.float32)
    plain[:, 2:8, 2:8] = warped
    mirrored = np.zeros((3, 8, 8), np.float32)
    mirrored[:, 2:8, 0:6] = warped[:, :, ::-1]
    kinds = [0 if np.array_equal(d, plain) else 1 if np.array_equal(d, mirrored) else -1
             for d in top[0].data]
    assert -1 not in kinds and 0 < sum(kinds) < 16


def test_context_padding_inside_the_image(pictures):
    folder, bgr = pictures
    window_file(folder, ["1 0.9 5 5 14 14"], [])
    # grown box 0..20 (21 wide) is clipped to 0..19 and warped to round(20 * 8 / 21) = 8.
    layer, bottom, top = window_data(folder, batch=1, param="fg_fraction: 1 context_pad: 2",
                                     transform="crop_size: 8")
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data[0], resize_linear(bgr[0], 8, 8))


def test_square_mode_grows_the_short_side(pictures):
    folder, bgr = pictures
    window_file(folder, ["1 0.9 2 5 5 6"], [])
    # 4 wide, 2 high: centre (4, 6), half 2 both ways -> x 2..6, y 4..8 (Caffe's rounding).
    layer, bottom, top = window_data(folder, batch=1,
                                     param='fg_fraction: 1 crop_mode: "square"',
                                     transform="crop_size: 8")
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data[0], resize_linear(bgr[0][:, 4:9, 2:7], 8, 8))


def test_mean_file_is_centred_and_scale_applies(pictures, tmp_path):
    folder, bgr = pictures
    window_file(folder, ["2 0.9 1 2 8 9"], [])
    mean = np.random.default_rng(1).uniform(0, 255, (3, 10, 10)).astype(np.float32)
    write_blob_proto(str(tmp_path / "mean.binaryproto"),
                     fill_blob_proto(caffe_pb2.BlobProto(), mean[None]))
    layer, bottom, top = window_data(
        folder, batch=1, param="fg_fraction: 1 scale: 0.5",
        transform=f'crop_size: 8 mean_file: "{tmp_path / "mean.binaryproto"}"')
    layer.forward(bottom, top)
    warped = resize_linear(bgr[0][:, 2:10, 1:9], 8, 8).astype(np.float32)
    np.testing.assert_array_equal(top[0].data[0], (warped - mean[:, 1:9, 1:9]) * np.float32(0.5))


def test_cached_images_give_the_same_batches(pictures):
    folder, _ = pictures
    window_file(folder, ["0 0.1 0 0 9 4"], ["3 0.9 3 2 12 9", "5 0.8 0 0 23 15"])
    results = []
    for cache in ("false", "true"):
        backend.set_random_seed(6)
        layer, bottom, top = window_data(folder, batch=8, param=f"cache_images: {cache}",
                                         phase=caffe_pb2.TRAIN, transform="crop_size: 6 "
                                         "mirror: true")
        layer.forward(bottom, top)
        results.append((top[0].data.copy(), top[1].data.copy()))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])
    assert set(results[0][1][:6]) == {0} and set(results[0][1][6:]) <= {3, 5}


def test_exact_resume(pictures):
    folder, _ = pictures
    window_file(folder, ["0 0.1 0 0 9 4", "0 0.2 4 4 12 12"], ["3 0.9 3 2 12 9", "5 0.8 0 0 23 15"])
    options = dict(batch=4, param="context_pad: 1", transform="crop_size: 6 mirror: true")
    backend.set_random_seed(3)
    layer, bottom, top = window_data(folder, **options)
    layer.forward(bottom, top)
    layer.prefetcher.wait_until_full()
    state = json.loads(json.dumps(layer.get_state()))
    expected = []
    for _ in range(3):
        layer.forward(bottom, top)
        expected.append((top[0].data.copy(), top[1].data.copy()))
    other, bottom2, top2 = window_data(folder, **options)
    other.set_state(state)
    for want_data, want_label in expected:
        other.forward(bottom2, top2)
        np.testing.assert_array_equal(top2[1].data, want_label)
        np.testing.assert_array_equal(top2[0].data, want_data)


def test_missing_image_is_an_error(pictures):
    folder, _ = pictures
    window_file(folder, ["0 0.1 0 0 9 4"], ["3 0.9 3 2 12 9"])
    (folder / "im1.png").unlink()
    with pytest.raises(CaffeError, match=r'"win".*im1\.png'):
        window_data(folder, param="cache_images: true")
    layer, bottom, top = window_data(folder, param="fg_fraction: 1")
    with pytest.raises(CaffeError, match=r'"win".*im1\.png'):
        layer.forward(bottom, top)


def test_setup_errors(pictures):
    folder, _ = pictures
    window_file(folder, ["0 0.1 0 0 9 4"], [])
    with pytest.raises(CaffeError, match="crop_size > 0"):
        window_data(folder, transform="mirror: true")
    with pytest.raises(CaffeError, match="no foreground windows"):
        window_data(folder)
    with pytest.raises(CaffeError, match="either 1 mean_value or as many as channels: 3"):
        window_data(folder, param="fg_fraction: 0", transform="crop_size: 6 mean_value: 1 "
                    "mean_value: 2")
    (folder / "windows.txt").write_text("# 0\nim0.png\n3 20 20\n1\n1 0.9 0 0\n")
    with pytest.raises(CaffeError, match="malformed"):
        window_data(folder)
    (folder / "windows.txt").write_text("")
    with pytest.raises(CaffeError, match="is empty"):
        window_data(folder)
