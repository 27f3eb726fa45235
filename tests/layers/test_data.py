"""Data layer: Datums from LMDB through the transformer, wrap-around, rand_skip, the prefetch
thread, exact resume, and the user errors; batches on the device in GPU mode."""
import io
import json
import logging

import numpy as np
import pytest
from PIL import Image

from pycaffe_cli import backend
from pycaffe_cli.data.db import open_db
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.blob_proto import fill_blob_proto
from pycaffe_cli.io.prototxt import write_blob_proto
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.synced_memory import Head
from tests.layer_helpers import set_up

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST
SHAPE = (2, 4, 5)


def images(count, shape=SHAPE, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (count,) + shape, dtype=np.uint8)


def write_db(path, datums):
    db = open_db(str(path), caffe_pb2.DataParameter.LMDB, mode="new")
    txn = db.transaction()
    for index, datum in enumerate(datums):
        txn.put(f"{index:08d}", datum if isinstance(datum, bytes) else datum.SerializeToString())
    txn.commit()
    db.close()
    return str(path)


def raw_datums(pixels):
    return [caffe_pb2.Datum(channels=p.shape[0], height=p.shape[1], width=p.shape[2],
                            data=p.tobytes(), label=10 + i) for i, p in enumerate(pixels)]


@pytest.fixture
def db(tmp_path):
    pixels = images(7)
    return write_db(tmp_path / "db", raw_datums(pixels)), pixels


def data_layer(source, batch=3, transform="", extra="backend: LMDB", phase=TEST, tops=2):
    top_text = 'top: "data" top: "label"' if tops == 2 else 'top: "data"'
    text = (f'name: "data" type: "Data" {top_text} data_param {{ source: "{source}" '
            f'batch_size: {batch} {extra} }} transform_param {{ {transform} }}')
    layer, bottom, top = set_up(text, [], tops, phase)
    return layer, bottom, top


def batches(layer, bottom, top, count):
    out = []
    for _ in range(count):
        layer.forward(bottom, top)
        out.append((top[0].data.copy(), top[1].data.copy() if len(top) > 1 else None))
    return out


@pytest.fixture
def log_lines():
    records = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: records.append(record.getMessage())
    old_level = LOG.level
    LOG.addHandler(handler)
    LOG.setLevel(logging.DEBUG)
    yield records
    LOG.removeHandler(handler)
    LOG.setLevel(old_level)


def test_batches_in_key_order_wrap_around_and_log(db, log_lines, engine):
    """In GPU mode the prefetch thread stages the batches in pinned memory and pushes them to
    the device: forward hands out tops already there."""
    source, pixels = db
    layer, bottom, top = data_layer(source, batch=3, transform="scale: 0.5")
    assert top[0].shape == (3,) + SHAPE and top[1].shape == (3,)
    assert "output data size: 3,2,4,5" in log_lines
    if engine == "gpu":
        assert layer.prefetcher.wait_until_full()  # the queued batches are on the device
    for step in range(5):  # 15 > 2 * 7 rows
        layer.forward(bottom, top)
        if engine == "gpu":
            assert top[0].data_memory.head is Head.AT_GPU
            assert top[1].data_memory.head is Head.AT_GPU
        rows = [(3 * step + i) % 7 for i in range(3)]
        np.testing.assert_array_equal(top[0].cpu_data,
                                      pixels[rows].astype(np.float32) * np.float32(0.5))
        np.testing.assert_array_equal(top[1].cpu_data, [10 + r for r in rows])
    assert "Restarting data prefetching from start." in log_lines
    layer.close()


def test_data_only_top(db):
    source, pixels = db
    layer, bottom, top = data_layer(source, batch=2, tops=1)
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, pixels[:2])


@pytest.mark.parametrize("phase", [TRAIN, TEST])
def test_mean_file_crop_and_mirror(db, tmp_path, phase):
    source, pixels = db
    mean = np.random.default_rng(1).uniform(0, 255, SHAPE).astype(np.float32)
    write_blob_proto(str(tmp_path / "mean.binaryproto"),
                     fill_blob_proto(caffe_pb2.BlobProto(), mean[None]))
    transform = (f'mean_file: "{tmp_path / "mean.binaryproto"}" crop_size: 3 mirror: true '
                 'scale: 0.25')
    backend.set_random_seed(4)
    layer, bottom, top = data_layer(source, batch=7, transform=transform, phase=phase)
    layer.forward(bottom, top)
    assert top[0].shape == (7, 2, 3, 3)
    flipped = 0
    for i in range(7):
        candidates = [((pixels[i, :, y:y + 3, x:x + 3] - mean[:, y:y + 3, x:x + 3])
                       * np.float32(0.25), (y, x)) for y in range(2) for x in range(3)]
        if phase == TEST:
            candidates = [c for c in candidates if c[1] == (0, 1)]  # centre: (1 // 2, 2 // 2)
        matches = [flip for c, _ in candidates for flip in (False, True)
                   if np.array_equal(top[0].data[i], c[:, :, ::-1] if flip else c)]
        assert matches, f"image {i} is no crop of its datum"
        flipped += matches[0]
    assert 0 < flipped < 7  # mirroring is random in both phases, as in Caffe


@pytest.mark.parametrize("values", [[20.5], [20.5, 100.0]])
def test_mean_values(db, values):
    source, pixels = db
    transform = " ".join(f"mean_value: {v}" for v in values)
    layer, bottom, top = data_layer(source, batch=2, transform=transform)
    layer.forward(bottom, top)
    mean = np.float32(values * (2 // len(values))).reshape(2, 1, 1)
    np.testing.assert_array_equal(top[0].data, pixels[:2].astype(np.float32) - mean)


def test_float_data_datums(tmp_path):
    values = np.random.default_rng(2).normal(size=(3, 1, 2, 3)).astype(np.float32)
    datums = [caffe_pb2.Datum(channels=1, height=2, width=3, float_data=v.ravel(), label=i)
              for i, v in enumerate(values)]
    layer, bottom, top = data_layer(write_db(tmp_path / "f", datums), batch=3,
                                    transform="scale: 2")
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, values * np.float32(2))


def png_datum(rgb, label):
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, "PNG")
    return caffe_pb2.Datum(data=buffer.getvalue(), encoded=True, label=label)


def test_encoded_png_datums_are_bgr_and_may_differ_in_size_with_crop(tmp_path):
    rng = np.random.default_rng(3)
    rgbs = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((4, 5), (5, 4))]
    source = write_db(tmp_path / "png", [png_datum(rgb, i) for i, rgb in enumerate(rgbs)])
    layer, bottom, top = data_layer(source, batch=2, transform="crop_size: 3")
    layer.forward(bottom, top)
    for i, rgb in enumerate(rgbs):
        h, w = rgb.shape[:2]
        top_left = ((h - 3) // 2, (w - 3) // 2)
        bgr = rgb[:, :, ::-1].transpose(2, 0, 1)
        np.testing.assert_array_equal(
            top[0].data[i], bgr[:, top_left[0]:top_left[0] + 3, top_left[1]:top_left[1] + 3])
    layer, bottom, top = data_layer(source, batch=1, transform="force_gray: true")
    assert top[0].shape == (1, 1, 4, 5)


def test_each_batch_takes_its_first_records_shape(tmp_path):
    rng = np.random.default_rng(4)
    rgbs = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((4, 5), (5, 4))]
    source = write_db(tmp_path / "png", [png_datum(rgb, i) for i, rgb in enumerate(rgbs)])
    layer, bottom, top = data_layer(source, batch=1)  # as in Caffe: reshape per batch
    for rgb in rgbs + rgbs:
        layer.forward(bottom, top)
        np.testing.assert_array_equal(top[0].data[0], rgb[:, :, ::-1].transpose(2, 0, 1))


def test_rand_skip_starts_at_a_random_record(db):
    source, pixels = db
    backend.set_random_seed(8)
    expected = int(np.random.default_rng(8).integers(0, 5))
    layer, bottom, top = data_layer(source, batch=2, extra="backend: LMDB rand_skip: 5")
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[1].data, [10 + expected, 10 + (expected + 1) % 7])


def test_prefetch_thread_runs_ahead_but_state_follows_forward(db):
    source, _ = db
    layer, bottom, top = data_layer(source, batch=2, extra="backend: LMDB prefetch: 3")
    assert layer.prefetcher.wait_until_full()
    assert layer.prefetcher.ready() == 3
    assert layer.get_state()["key"] == b"00000000".hex()  # nothing handed out yet
    layer.forward(bottom, top)
    assert layer.get_state()["key"] == b"00000002".hex()
    layer.close()
    assert not layer.prefetcher.running


def test_exact_resume_matches_an_uninterrupted_reader(db):
    source, _ = db
    transform = "crop_size: 3 mirror: true"
    backend.set_random_seed(1)
    layer, bottom, top = data_layer(source, batch=3, transform=transform, phase=TRAIN)
    batches(layer, bottom, top, 2)
    layer.prefetcher.wait_until_full()  # the thread is well past the state we save
    state = json.loads(json.dumps(layer.get_state()))
    expected = batches(layer, bottom, top, 4)
    backend.set_random_seed(99)
    other, bottom2, top2 = data_layer(source, batch=3, transform=transform, phase=TRAIN)
    batches(other, bottom2, top2, 1)
    other.set_state(state)
    for (data, label), (want_data, want_label) in zip(batches(other, bottom2, top2, 4),
                                                      expected):
        np.testing.assert_array_equal(data, want_data)
        np.testing.assert_array_equal(label, want_label)


def test_set_state_with_unknown_key_is_an_error_and_keeps_serving(db):
    source, pixels = db
    layer, bottom, top = data_layer(source, batch=2)
    with pytest.raises(CaffeError, match='"data".*no record'):
        layer.set_state({"key": b"zzz".hex(), "rng": None})
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, pixels[:2])


def test_shape_change_without_crop_is_an_error(tmp_path):
    datums = raw_datums(images(2)) + raw_datums(images(1, (2, 3, 3)))
    layer, bottom, top = data_layer(write_db(tmp_path / "mixed", datums), batch=3)
    with pytest.raises(CaffeError, match='"data".*differ in size'):
        layer.forward(bottom, top)


def test_corrupt_record_raises_in_forward_instead_of_hanging(tmp_path):
    source = write_db(tmp_path / "bad", raw_datums(images(2)) + [b"\xff\xff\xff\xff"])
    layer, bottom, top = data_layer(source, batch=2)
    layer.forward(bottom, top)
    with pytest.raises(CaffeError, match="\"data\": record '00000002' .* not a valid Datum"):
        layer.forward(bottom, top)


def test_unset_backend_reads_an_lmdb_folder(db):
    source, pixels = db  # Caffe's default is LEVELDB; an LMDB folder is recognised instead
    layer, bottom, top = data_layer(source, batch=2, extra="")
    layer.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, pixels[:2])


def test_leveldb_without_plyvel_says_so(db):
    try:  # plyvel is optional: only the error path is tested here
        import plyvel  # noqa: F401
        pytest.skip("plyvel is installed")
    except ImportError:
        pass
    with pytest.raises(CaffeError, match='"data".*plyvel'):
        data_layer(db[0], extra="backend: LEVELDB")


def test_missing_database_names_layer_and_path(tmp_path):
    with pytest.raises(CaffeError, match=f'"data".*{tmp_path / "nope"}'):
        data_layer(tmp_path / "nope")


def test_empty_database(tmp_path):
    with pytest.raises(CaffeError, match='"data".*is empty'):
        data_layer(write_db(tmp_path / "empty", []))


def test_param_errors(db):
    source, _ = db
    with pytest.raises(CaffeError, match="mean_file and mean_value"):
        data_layer(source, transform='mean_file: "m.binaryproto" mean_value: 1')
    with pytest.raises(CaffeError, match="either 1 mean_value or as many as channels: 2"):
        data_layer(source, transform="mean_value: 1 mean_value: 2 mean_value: 3")
    with pytest.raises(CaffeError, match="batch_size must be positive"):
        data_layer(source, batch=0)


# --- GPU mode only ----------------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_mode_switched_on_after_the_thread_filled_its_queue(db):
    source, pixels = db
    layer, bottom, top = data_layer(source, batch=2)
    assert layer.prefetcher.wait_until_full()      # CPU-mode batches, no device copies
    backend.set_mode_gpu(0)
    try:
        layer.forward(bottom, top)
        np.testing.assert_array_equal(top[0].cpu_data, pixels[:2])
    finally:
        backend.set_mode_cpu()
        layer.close()
