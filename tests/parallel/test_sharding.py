"""Which records each rank reads: Caffe's DataLayer / HDF5DataLayer Skip rule."""
import h5py
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.data.db import open_db
from pycaffe_cli.proto import caffe_pb2
from tests.layer_helpers import set_up

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST


def write_db(path, count):
    """An LMDB of ``count`` 1x2x2 Datums labelled 10, 11, ..."""
    db = open_db(str(path), caffe_pb2.DataParameter.LMDB, mode="new")
    txn = db.transaction()
    for index in range(count):
        datum = caffe_pb2.Datum(channels=1, height=2, width=2, data=bytes([index] * 4),
                                label=10 + index)
        txn.put(f"{index:08d}", datum.SerializeToString())
    txn.commit()
    db.close()
    return str(path)


def data_layer(source, batch, phase):
    text = (f'name: "data" type: "Data" top: "data" top: "label" data_param {{ source: '
            f'"{source}" batch_size: {batch} backend: LMDB }}')
    return set_up(text, [], 2, phase)


def write_h5(path, first_label, rows):
    with h5py.File(path, "w") as stream:
        stream["data"] = np.zeros((rows, 2), np.float32)
        stream["label"] = np.arange(first_label, first_label + rows, dtype=np.float32)


def hdf5_data(batch):
    return (f'name: "h5" type: "HDF5Data" top: "data" top: "label" hdf5_data_param {{ '
            f'source: "list.txt" batch_size: {batch} }}')


@pytest.fixture
def as_rank():
    """Set Caffe's solver_count / solver_rank for the test; put back one rank after."""
    def set_rank(rank, count):
        backend.set_solver_setting("solver_count", count)
        backend.set_solver_setting("solver_rank", rank)
    yield set_rank
    set_rank(0, 1)


@pytest.fixture
def db(tmp_path):
    return write_db(tmp_path / "db", 7)


def labels_of(layer, bottom, top, batches):
    out = []
    for _ in range(batches):
        layer.forward(bottom, top)
        out += top[1].data.astype(int).tolist()
    return out


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_data_rank_r_reads_records_r_r_plus_n_and_wraps_around(db, as_rank, rank):
    as_rank(rank, 3)
    layer, bottom, top = data_layer(db, batch=2, phase=TRAIN)
    # the endless sequence 0..6, 0..6, ... of 7 records; rank r keeps offsets r, r + 3, ...
    expected = [10 + (offset % 7) for offset in range(rank, 3 * 8, 3)][:8]
    assert labels_of(layer, bottom, top, 4) == expected
    layer.close()


def test_data_test_phase_reads_everything(db, as_rank):
    as_rank(1, 2)
    layer, bottom, top = data_layer(db, batch=3, phase=TEST)
    assert labels_of(layer, bottom, top, 2) == [10, 11, 12, 13, 14, 15]
    layer.close()


def test_data_resume_continues_the_ranks_own_records(db, as_rank):
    as_rank(1, 2)
    layer, bottom, top = data_layer(db, batch=2, phase=TRAIN)
    labels_of(layer, bottom, top, 3)
    state = layer.get_state()
    assert state["offset"] == 0            # Caffe's offset_ % size, after the last record
    after = labels_of(layer, bottom, top, 3)
    again, bottom, top = data_layer(db, batch=2, phase=TRAIN)
    again.set_state(state)
    assert labels_of(again, bottom, top, 3) == after
    layer.close()
    again.close()


@pytest.fixture
def h5(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_h5(tmp_path / "a.h5", 0, 5)
    write_h5(tmp_path / "b.h5", 100, 3)
    (tmp_path / "list.txt").write_text("a.h5\nb.h5\n")
    return [0, 1, 2, 3, 4, 100, 101, 102]


@pytest.mark.parametrize("rank", [0, 1])
def test_hdf5_rank_r_reads_rows_r_r_plus_n_across_files(h5, as_rank, rank):
    as_rank(rank, 2)
    layer, bottom, top = set_up(hdf5_data(batch=3), [], 2, TRAIN)
    expected = [h5[offset % 8] for offset in range(rank, 2 * 9, 2)]
    assert labels_of(layer, bottom, top, 3) == expected


def test_hdf5_resume_and_the_test_phase(h5, as_rank):
    as_rank(1, 2)
    tester, bottom, top = set_up(hdf5_data(batch=4), [], 2, TEST)
    assert labels_of(tester, bottom, top, 1) == [0, 1, 2, 3]
    layer, bottom, top = set_up(hdf5_data(batch=3), [], 2, TRAIN)
    labels_of(layer, bottom, top, 1)
    state = layer.get_state()
    after = labels_of(layer, bottom, top, 2)
    again, bottom, top = set_up(hdf5_data(batch=3), [], 2, TRAIN)
    again.set_state(state)
    assert labels_of(again, bottom, top, 2) == after
    assert np.all(np.isin(after, h5))
