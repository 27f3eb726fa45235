"""HDF5Output: batches appended to "data" and "label" (4-D, float32), readable after each."""
import h5py
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from tests.layer_helpers import blob_of, set_up


def hdf5_output(path):
    return (f'name: "out" type: "HDF5Output" bottom: "data" bottom: "label" '
            f'hdf5_output_param {{ file_name: "{path}" }}')


def batch(seed, n=2, shape=(3, 2, 2)):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n,) + shape).astype(np.float32), rng.integers(0, 9, n)


def test_round_trip(tmp_path):
    path = tmp_path / "out.h5"
    data1, label1 = batch(0)
    layer, bottom, top = set_up(hdf5_output(path), [data1, label1], 0)
    layer.forward(bottom, top)
    with h5py.File(path, "r") as f:  # readable while the layer still holds it open
        np.testing.assert_array_equal(f["data"][()], data1)
    data2, label2 = batch(1)
    bottom[0].data[...] = data2
    bottom[1].data[...] = label2
    layer.forward(bottom, top)
    layer.close()
    layer.close()
    with h5py.File(path, "r") as f:
        assert f["data"].dtype == np.float32
        np.testing.assert_array_equal(f["data"][()], np.concatenate([data1, data2]))
        np.testing.assert_array_equal(f["label"][()],
                                      np.concatenate([label1, label2]).reshape(4, 1, 1, 1))


def test_round_trip_through_hdf5_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data, label = batch(2, n=4)
    layer, bottom, top = set_up(hdf5_output("o.h5"), [data, label], 0)
    layer.forward(bottom, top)
    layer.close()
    (tmp_path / "list.txt").write_text("o.h5")
    reader, _, tops = set_up('name: "in" type: "HDF5Data" top: "data" top: "label" '
                             'hdf5_data_param { source: "list.txt" batch_size: 4 }', [], 2)
    reader.forward([], tops)
    np.testing.assert_array_equal(tops[0].data.reshape(data.shape), data)
    np.testing.assert_array_equal(tops[1].data.ravel(), label)


def test_legacy_4d_shapes(tmp_path):
    path = tmp_path / "out.h5"
    layer, bottom, top = set_up(hdf5_output(path), [np.ones((2, 5)), np.ones(2)], 0)
    layer.forward(bottom, top)
    layer.close()
    with h5py.File(path, "r") as f:
        assert f["data"].shape == (2, 5, 1, 1)
        assert f["label"].shape == (2, 1, 1, 1)


def test_truncates_existing_file(tmp_path):
    path = tmp_path / "out.h5"
    with h5py.File(path, "w") as f:
        f["old"] = np.zeros(3)
    layer, bottom, top = set_up(hdf5_output(path), [np.ones((2, 1)), np.ones(2)], 0)
    layer.close()
    with h5py.File(path, "r") as f:
        assert list(f.keys()) == []


def test_missing_folder(tmp_path):
    with pytest.raises(CaffeError, match='"out".*no_such_dir.*does not exist'):
        set_up(hdf5_output(tmp_path / "no_such_dir" / "o.h5"), [np.ones(2), np.ones(2)], 0)


def test_batch_size_mismatch(tmp_path):
    layer, bottom, top = set_up(hdf5_output(tmp_path / "o.h5"), [np.ones((2, 3)), np.ones(3)],
                                0)
    with pytest.raises(CaffeError, match='"out".*same batch size'):
        layer.forward(bottom, top)


def test_changed_row_shape(tmp_path):
    layer, bottom, top = set_up(hdf5_output(tmp_path / "o.h5"), [np.ones((2, 3)), np.ones(2)],
                                0)
    layer.forward(bottom, top)
    bottom[0].reshape((2, 4))
    with pytest.raises(CaffeError, match='"out".*changed shape'):
        layer.forward(bottom, top)


def test_too_many_axes(tmp_path):
    layer, bottom, top = set_up(hdf5_output(tmp_path / "o.h5"),
                                [np.ones((2, 1, 1, 1, 1)), np.ones(2)], 0)
    with pytest.raises(CaffeError, match='"out".*4-D'):
        layer.forward(bottom, top)


def test_forward_after_close(tmp_path):
    layer, bottom, top = set_up(hdf5_output(tmp_path / "o.h5"), [np.ones(2), np.ones(2)], 0)
    layer.close()
    with pytest.raises(CaffeError, match='"out".*closed'):
        layer.forward(bottom, top)


def test_needs_two_bottoms(tmp_path):
    with pytest.raises(CaffeError, match='"out"'):
        set_up(hdf5_output(tmp_path / "o.h5"), [blob_of(np.ones(2))], 0)
