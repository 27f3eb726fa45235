"""Prefetcher: runs ahead by exactly its depth, hands batches over in order, recycles their
arrays, re-raises the reader's errors, stops cleanly."""
import threading

import numpy as np
import pytest

from pycaffe_cli.data.prefetch import Batch, Prefetcher
from pycaffe_cli.errors import CaffeError


class CountingReader:
    """Batch k holds k; fails with CaffeError at batch ``fail_at``."""

    def __init__(self, fail_at=None):
        self.next = 0
        self.fail_at = fail_at
        self.recycled = 0
        self.thread_names = set()

    def load_batch(self, recycled):
        self.thread_names.add(threading.current_thread().name)
        if self.next == self.fail_at:
            raise CaffeError("record 7 is corrupt")
        if recycled is not None:
            self.recycled += 1
            data = recycled.data
        else:
            data = np.empty(2, np.float32)
        data[:] = self.next
        self.next += 1
        return Batch(data, None, self.position())

    def position(self):
        return {"next": self.next}

    def restore(self, position):
        self.next = position["next"]


def test_runs_ahead_by_depth_and_keeps_order():
    reader = CountingReader()
    prefetcher = Prefetcher(reader, depth=3, name="t")
    prefetcher.start()
    try:
        assert prefetcher.wait_until_full()
        assert prefetcher.ready() == 3
        assert reader.next in (3, 4)  # three queued, at most one more waiting to be queued
        assert reader.thread_names == {"prefetch-t"}
        for expected in range(6):
            batch = prefetcher.next_batch()
            assert batch.data[0] == expected and batch.position == {"next": expected + 1}
            prefetcher.recycle(batch)
        assert reader.recycled > 0
    finally:
        prefetcher.stop()
    assert not prefetcher.running


def test_reader_error_reaches_the_consumer_every_time():
    prefetcher = Prefetcher(CountingReader(fail_at=2), depth=4)
    prefetcher.start()
    try:
        assert prefetcher.next_batch().data[0] == 0
        assert prefetcher.next_batch().data[0] == 1
        for _ in range(2):
            with pytest.raises(CaffeError, match="record 7 is corrupt"):
                prefetcher.next_batch()
    finally:
        prefetcher.stop()


def test_stop_drops_queued_batches_and_restart_continues_from_the_reader():
    reader = CountingReader()
    prefetcher = Prefetcher(reader, depth=2)
    prefetcher.start()
    prefetcher.wait_until_full()
    prefetcher.stop()
    assert prefetcher.ready() == 0
    reader.restore({"next": 10})
    prefetcher.start()
    try:
        assert prefetcher.next_batch().data[0] == 10
    finally:
        prefetcher.stop()


def test_stop_called_on_the_thread_itself_ends_it():
    """The garbage collector may drop a data layer, and so stop its prefetcher, on the
    prefetch thread: that must end the thread, not raise "cannot join current thread"."""
    threads, errors = [], []

    class StoppingReader(CountingReader):
        def load_batch(self, recycled):
            threads.append(threading.current_thread())
            try:
                prefetcher.stop()
            except Exception as error:   # noqa: BLE001 -- what the thread would have died of
                errors.append(error)
            return super().load_batch(recycled)
    prefetcher = Prefetcher(StoppingReader(), depth=2, name="t")
    prefetcher.start()
    for _ in range(100):
        if threads:
            break
        threading.Event().wait(0.01)
    threads[0].join(timeout=5)
    assert not threads[0].is_alive() and errors == []
    assert not prefetcher.running
