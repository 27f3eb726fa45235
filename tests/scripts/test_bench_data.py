"""scripts/bench_data: its generated images feed both data layers it times."""
import numpy as np
import pytest

from tests.scripts.loading import load_script


@pytest.fixture(scope="module")
def bench_data():
    return load_script("bench_data")


def test_both_layers_run_on_the_generated_images(bench_data, tmp_path):
    bench_data.write_images(str(tmp_path), 8, np.random.default_rng(0))
    seconds, peak = bench_data.time_convert(str(tmp_path), encoded=True)
    assert seconds > 0 and peak > 0
    assert bench_data.time_data_layer(str(tmp_path), 1) > 0
    assert bench_data.time_image_data_layer(str(tmp_path), 1) > 0
    records = bench_data.encoded_records(str(tmp_path), 3)
    assert len(records) == 3 and all(record[:2].tobytes() == b"\xff\xd8" for record in records)


def test_opencv_reference_is_the_best_pass_per_batch_of_fifty(bench_data, monkeypatch):
    clock = iter([0.0, 0.4, 1.0, 1.2])  # two passes over two images: 0.4 s, then 0.2 s
    monkeypatch.setattr(bench_data.time, "perf_counter", lambda: next(clock))
    calls = []
    milliseconds = bench_data.opencv_batch_ms(calls.append, [1, 2], repeats=2)
    assert calls == [1, 2, 1, 2]
    assert milliseconds == pytest.approx(0.1 * 50 * 1000)
