"""ImageData layer: listed PNG files, BGR / grey, resizing, shuffling, rand_skip, resume,
and the user errors."""
import json

import numpy as np
import pytest
from PIL import Image

from pycaffe_cli import backend
from pycaffe_cli.data.linear_resize import resize_linear
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.proto import caffe_pb2
from tests.layer_helpers import set_up

COUNT = 5


@pytest.fixture
def listed(tmp_path):
    """Five 6x7 RGB PNGs (one name with spaces) and a list file with labels 20..24."""
    rng = np.random.default_rng(0)
    rgbs = rng.integers(0, 256, (COUNT, 6, 7, 3), dtype=np.uint8)
    names = [f"img {i}.png" if i == 2 else f"img{i}.png" for i in range(COUNT)]
    for name, rgb in zip(names, rgbs):
        Image.fromarray(rgb).save(tmp_path / name)
    (tmp_path / "list.txt").write_text("".join(f"{n} {20 + i}\n" for i, n in enumerate(names)))
    bgr = np.ascontiguousarray(rgbs[:, :, :, ::-1].transpose(0, 3, 1, 2))
    return tmp_path, bgr


def image_data(folder, batch=2, param="", transform="", phase=None):
    text = (f'name: "img" type: "ImageData" top: "data" top: "label" image_data_param {{ '
            f'source: "{folder / "list.txt"}" root_folder: "{folder}/" batch_size: {batch} '
            f'{param} }} transform_param {{ {transform} }}')
    return set_up(text, [], 2) if phase is None else set_up(text, [], 2, phase)


def run(layer, bottom, top, steps):
    out = []
    for _ in range(steps):
        layer.forward(bottom, top)
        out.append((top[0].data.copy(), top[1].data.copy()))
    return out


def test_reads_listed_images_in_order_as_bgr(listed):
    folder, bgr = listed
    layer, bottom, top = image_data(folder, batch=3, transform="scale: 0.5")
    assert top[0].shape == (3, 3, 6, 7)
    for step, (data, label) in enumerate(run(layer, bottom, top, 3)):  # wraps around
        rows = [(3 * step + i) % COUNT for i in range(3)]
        np.testing.assert_array_equal(data, bgr[rows] * np.float32(0.5))
        np.testing.assert_array_equal(label, [20 + r for r in rows])


def test_resize_and_gray(listed):
    folder, bgr = listed
    layer, bottom, top = image_data(folder, param="new_height: 4 new_width: 9 is_color: false")
    layer.forward(bottom, top)
    assert top[0].shape == (2, 1, 4, 9)
    b, g, r = (bgr[0, c].astype(np.int64) for c in range(3))
    gray = ((9797 * r + 19234 * g + 3737 * b) >> 15).astype(np.uint8)  # libpng's RGB->grey
    np.testing.assert_array_equal(top[0].data[0, 0], resize_linear(gray[None], 4, 9)[0])


def test_centre_crop_and_mean_values_apply(listed):
    folder, bgr = listed
    layer, bottom, top = image_data(folder, batch=1, transform="crop_size: 4 mean_value: 10 "
                                    "mean_value: 20 mean_value: 30", phase=caffe_pb2.TEST)
    layer.forward(bottom, top)
    mean = np.float32([10, 20, 30]).reshape(3, 1, 1)
    np.testing.assert_array_equal(top[0].data[0], bgr[0, :, 1:5, 1:5] - mean)


def shuffled_labels(folder, seed, steps=5):
    backend.set_random_seed(seed)
    layer, bottom, top = image_data(folder, param="shuffle: true")
    return np.concatenate([label for _, label in run(layer, bottom, top, steps)])


def test_shuffle_is_repeatable_and_reshuffles_each_pass(listed):
    folder, _ = listed
    first = shuffled_labels(folder, 3)
    np.testing.assert_array_equal(first, shuffled_labels(folder, 3))
    passes = first.reshape(2, COUNT)
    for labels in passes:
        assert sorted(labels) == list(range(20, 25))
    assert not np.array_equal(passes[0], passes[1])
    assert not np.array_equal(first, shuffled_labels(folder, 4))


def test_rand_skip(listed):
    folder, _ = listed
    backend.set_random_seed(5)
    expected = int(np.random.default_rng(5).integers(0, 4))
    layer, bottom, top = image_data(folder, batch=1, param="rand_skip: 4")
    layer.forward(bottom, top)
    assert top[1].data[0] == 20 + expected


def test_exact_resume_with_shuffle_and_random_crops(listed):
    folder, _ = listed
    options = dict(param="shuffle: true", transform="crop_size: 3 mirror: true")
    backend.set_random_seed(2)
    layer, bottom, top = image_data(folder, **options)
    run(layer, bottom, top, 4)  # into the second pass
    layer.prefetcher.wait_until_full()
    state = json.loads(json.dumps(layer.get_state()))
    expected = run(layer, bottom, top, 4)
    backend.set_random_seed(77)
    other, bottom2, top2 = image_data(folder, **options)
    other.set_state(state)
    for (data, label), (want_data, want_label) in zip(run(other, bottom2, top2, 4), expected):
        np.testing.assert_array_equal(label, want_label)
        np.testing.assert_array_equal(data, want_data)


def test_missing_image_names_the_file(listed):
    folder, _ = listed
    (folder / "img3.png").unlink()
    layer, bottom, top = image_data(folder, batch=2)
    layer.forward(bottom, top)
    with pytest.raises(CaffeError, match=r'"img".*img3\.png'):
        layer.forward(bottom, top)


def test_list_errors(listed):
    folder, _ = listed
    (folder / "list.txt").write_text("img0.png 1\nimg1.png\n")
    with pytest.raises(CaffeError, match=r"list.txt:2: expected"):
        image_data(folder)
    (folder / "list.txt").write_text("\n")
    with pytest.raises(CaffeError, match="names no images"):
        image_data(folder)
    (folder / "list.txt").unlink()
    with pytest.raises(CaffeError, match='"img": cannot read image list'):
        image_data(folder)


def test_new_height_without_new_width_is_an_error(listed):
    folder, _ = listed
    with pytest.raises(CaffeError, match="new_height and new_width"):
        image_data(folder, param="new_height: 4")
