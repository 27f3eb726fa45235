"""HDF5Data: rows from a list of .h5 files, batches across file boundaries, shuffling."""
import h5py
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from tests.layer_helpers import set_up

ROWS = (5, 3)


def write_h5(path, first_label, rows, row_shape=(2, 3)):
    data = np.random.default_rng(first_label).normal(size=(rows,) + row_shape)  # float64
    labels = np.arange(first_label, first_label + rows, dtype=np.int32)
    with h5py.File(path, "w") as f:
        f["data"] = data
        f["label"] = labels
    return data, labels


@pytest.fixture
def two_files(tmp_path, monkeypatch):
    """Two files (5 and 3 rows) listed by relative path, run from tmp_path."""
    monkeypatch.chdir(tmp_path)
    a = write_h5(tmp_path / "a.h5", 0, ROWS[0])
    b = write_h5(tmp_path / "b.h5", 100, ROWS[1])
    (tmp_path / "list.txt").write_text("a.h5\nb.h5\n")
    data = np.concatenate([a[0], b[0]])
    labels = np.concatenate([a[1], b[1]])
    return data, labels


def hdf5_data(batch=3, shuffle=False, source="list.txt", tops=("data", "label"), extra=""):
    top_text = " ".join(f'top: "{t}"' for t in tops)
    return (f'name: "h5" type: "HDF5Data" {top_text} hdf5_data_param {{ source: "{source}" '
            f'batch_size: {batch} shuffle: {str(shuffle).lower()} }} {extra}')


def test_setup_shapes(two_files):
    layer, bottom, top = set_up(hdf5_data(), [], 2)
    assert top[0].shape == (3, 2, 3)
    assert top[1].shape == (3,)


def test_batches_span_files_and_wrap(two_files):
    data, labels = two_files
    layer, bottom, top = set_up(hdf5_data(batch=3), [], 2)
    total = sum(ROWS)
    for step in range(6):  # 18 rows: more than two passes over the 8
        layer.forward(bottom, top)
        rows = [(3 * step + i) % total for i in range(3)]
        np.testing.assert_array_equal(top[0].data, data[rows].astype(np.float32))
        np.testing.assert_array_equal(top[1].data, labels[rows])
        assert top[0].data.dtype == np.float32


def test_single_file_wraps(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data, labels = write_h5(tmp_path / "only.h5", 0, 4)
    (tmp_path / "list.txt").write_text("only.h5")
    layer, bottom, top = set_up(hdf5_data(batch=3), [], 2)
    layer.forward(bottom, top)
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[1].data, [3, 0, 1])


def served_labels(steps, batch=4, seed=7):
    backend.set_random_seed(seed)
    layer, bottom, top = set_up(hdf5_data(batch=batch, shuffle=True), [], 2)
    out = []
    for _ in range(steps):
        layer.forward(bottom, top)
        out.append(top[1].data.copy())
    return np.concatenate(out), layer, bottom, top


def test_shuffle_is_repeatable_and_covers_every_row(two_files):
    data, labels = two_files
    first, layer, bottom, top = served_labels(6)
    second, *_ = served_labels(6)
    np.testing.assert_array_equal(first, second)
    other, *_ = served_labels(6, seed=8)
    assert not np.array_equal(first, other)
    for start in range(0, len(first), sum(ROWS)):  # each pass serves every row once
        assert sorted(first[start:start + sum(ROWS)]) == sorted(labels)
    # A file's rows stay together within a pass (files are served one at a time).
    from_a = first[:sum(ROWS)] < 100
    assert from_a.tolist() in ([True] * 5 + [False] * 3, [False] * 3 + [True] * 5)
    # Data rows still match their labels.
    layer.forward(bottom, top)
    index = {int(v): i for i, v in enumerate(labels)}
    np.testing.assert_array_equal(
        top[0].data, data[[index[int(v)] for v in top[1].data]].astype(np.float32))


def test_state_round_trip(two_files):
    layer, bottom, top = set_up(hdf5_data(batch=3), [], 2)
    for _ in range(3):
        layer.forward(bottom, top)
    state = layer.get_state()
    layer.forward(bottom, top)
    layer.forward(bottom, top)
    expected = top[1].data.copy()
    layer.set_state(state)
    layer.forward(bottom, top)
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[1].data, expected)


def test_state_keeps_shuffled_order(two_files):
    _, layer, bottom, top = served_labels(3, batch=3)
    state = layer.get_state()
    layer.forward(bottom, top)
    layer.set_state(state)
    assert layer.get_state() == state


def test_extra_top_names_pick_datasets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with h5py.File("x.h5", "w") as f:
        f["x"] = np.arange(8, dtype=np.float32).reshape(4, 2)
        f["y"] = np.arange(4)
        f["z"] = np.arange(12.0).reshape(4, 3)
    (tmp_path / "list.txt").write_text("x.h5")
    layer, bottom, top = set_up(hdf5_data(batch=2, tops=("z", "x")), [], 2)
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, [[0, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(top[1].data, [[0, 1], [2, 3]])


def test_missing_source(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CaffeError, match='"h5".*nope.txt'):
        set_up(hdf5_data(source="nope.txt"), [], 2)


def test_empty_list(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "list.txt").write_text("\n \n")
    with pytest.raises(CaffeError, match='"h5".*at least 1 HDF5 filename.*list.txt'):
        set_up(hdf5_data(), [], 2)


def test_missing_h5_file(two_files, tmp_path):
    (tmp_path / "list.txt").write_text("a.h5\nmissing.h5\n")
    with pytest.raises(CaffeError, match='"h5".*missing.h5.*does not exist'):
        layer, bottom, top = set_up(hdf5_data(batch=3), [], 2)
        layer.forward(bottom, top)
        layer.forward(bottom, top)


def test_corrupt_h5_file(two_files, tmp_path):
    (tmp_path / "bad.h5").write_bytes(b"this is not an HDF5 file" * 10)
    (tmp_path / "list.txt").write_text("bad.h5")
    with pytest.raises(CaffeError, match='"h5".*bad.h5'):
        set_up(hdf5_data(), [], 2)


def test_missing_dataset(two_files):
    with pytest.raises(CaffeError, match='"h5".*a.h5.*no dataset \'weights\''):
        set_up(hdf5_data(tops=("data", "weights")), [], 2)


def test_mismatched_rows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with h5py.File("m.h5", "w") as f:
        f["data"] = np.zeros((4, 2))
        f["label"] = np.zeros(3)
    (tmp_path / "list.txt").write_text("m.h5")
    with pytest.raises(CaffeError, match='"h5".*m.h5.*same number of rows'):
        set_up(hdf5_data(), [], 2)


def test_later_file_with_other_row_shape(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_h5(tmp_path / "a.h5", 0, 3)
    write_h5(tmp_path / "b.h5", 0, 3, row_shape=(3, 2))
    (tmp_path / "list.txt").write_text("a.h5 b.h5")
    layer, bottom, top = set_up(hdf5_data(batch=3), [], 2)
    with pytest.raises(CaffeError, match='"h5".*b.h5.*rows of shape'):
        layer.forward(bottom, top)


@pytest.mark.parametrize("text, message", [
    (hdf5_data(batch=0), "batch_size must be positive"),
    (hdf5_data(extra="transform_param { scale: 2 }"), "does not transform"),
])
def test_param_errors(two_files, text, message):
    with pytest.raises(CaffeError, match=f'"h5".*{message}'):
        set_up(text, [], 2)


def test_top_names_must_match_top_blobs(two_files):
    with pytest.raises(CaffeError, match='"h5".*top name'):
        set_up(hdf5_data(tops=("data",)), [], 2)
