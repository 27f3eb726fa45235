"""A background thread that keeps ``depth`` batches ready (Caffe's BasePrefetchingDataLayer).

A *reader* (one per data layer) knows how to produce batches; it runs only on the prefetch
thread while the thread lives, so it needs no locking:

    reader.load_batch(recycled) -> Batch   fill a batch (reusing ``recycled``'s arrays when
                                           they fit) and record in ``batch.position`` the
                                           reader's JSON-able state after it
    reader.position() -> dict              the state now (before the first batch)
    reader.restore(position)               continue from such a state

Batches go through a bounded queue of ``depth`` entries, so the thread runs at most ``depth``
batches ahead of ``forward``; consumed batches come back through a free list so their arrays
are reused. The position of the last batch *handed out* is what a snapshot must record:
batches still in the queue were read but never used, and a resumed run must read them again.

``after_load(batch)``, when given, also runs on the thread for each finished batch: in GPU
mode the data layers use it to copy the batch to the device there (base_data.py), so the
upload overlaps the net's work as Caffe's prefetch thread does.

An exception on the thread (a corrupt record, a missing image) is stored and raised by the
next ``next_batch`` call instead of leaving ``forward`` waiting forever. The thread is a
daemon and holds no reference to the layer, so dropping the layer (or ``stop``) ends it.
"""
import queue
import threading
import time
from dataclasses import dataclass, field

import numpy as np

_POLL_S = 0.05


@dataclass
class Batch:
    """One prefetched batch: float32 data, optional float32 labels, the reader's state after."""
    data: np.ndarray
    label: np.ndarray = None
    position: dict = field(default_factory=dict)
    device: dict = field(default_factory=dict)  # device copies and staging buffers (GPU mode)


class _Failure:
    def __init__(self, error):
        self.error = error


class Prefetcher:
    """Runs ``reader.load_batch`` on a daemon thread, ``depth`` batches ahead.

    Args:
        reader: the batch producer (see the module docstring).
        depth: how many finished batches may wait in the queue (Caffe's data_param.prefetch).
        name: a label for the thread (the layer name).
        after_load: called on the thread with each batch the reader made (see module doc).
    """

    def __init__(self, reader, depth, name="data", after_load=None):
        if depth < 1:
            raise ValueError(f"prefetch depth must be at least 1, got {depth}")
        self.reader = reader
        self.depth = depth
        self.name = name
        self.after_load = after_load
        self._thread = None
        self._stop = None
        self._full = None
        self._free = queue.SimpleQueue()
        self._failure = None

    @property
    def running(self):
        return self._thread is not None and self._thread.is_alive()

    def start(self):
        """Start filling the queue from the reader's current position."""
        if self._thread is not None:
            raise RuntimeError("prefetch thread already started")
        self._failure = None
        self._stop = threading.Event()
        self._full = queue.Queue(self.depth)
        self._thread = threading.Thread(target=_fill, name=f"prefetch-{self.name}", daemon=True,
                                        args=(self.reader, self._full, self._free, self._stop,
                                              self.after_load))
        self._thread.start()

    def stop(self):
        """Stop the thread and drop the batches it had ready (their arrays are kept)."""
        if self._thread is None:
            return
        self._stop.set()
        # The garbage collector may drop the layer (and so call this) on the thread itself,
        # which then ends at its next look at the stop flag.
        if self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None
        while True:
            try:
                item = self._full.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, Batch):
                self._free.put(item)

    def next_batch(self):
        """The next batch, waiting for the thread if needed.

        Raises:
            whatever the reader raised on the thread (again on every later call).
        """
        if self._failure is not None:
            raise self._failure.error
        if self._thread is None:
            raise RuntimeError("prefetch thread not started")
        while True:
            try:
                item = self._full.get(timeout=_POLL_S)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._full.empty():
                    raise RuntimeError(f"prefetch thread of {self.name!r} ended unexpectedly")
        if isinstance(item, _Failure):
            self._failure = item
            raise item.error
        return item

    def recycle(self, batch):
        """Give a consumed batch's arrays back for reuse."""
        self._free.put(batch)

    def ready(self):
        """How many finished batches are waiting."""
        return 0 if self._full is None else self._full.qsize()

    def wait_until_full(self, timeout=10.0):
        """Block until the queue holds ``depth`` batches (or the thread failed); True if full.
        For tests and benchmarks: it shows the thread running ahead of the consumer."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready() >= self.depth:
                return True
            if not self.running:
                break
            time.sleep(_POLL_S / 5)
        return self.ready() >= self.depth


def _fill(reader, full, free, stop, after_load=None):
    """Thread body: produce batches until told to stop or the reader fails."""
    while not stop.is_set():
        try:
            recycled = free.get_nowait()
        except queue.Empty:
            recycled = None
        try:
            item = reader.load_batch(recycled)
            if after_load is not None:
                after_load(item)
        except BaseException as error:  # handed to the consumer, which re-raises it
            item = _Failure(error)
        while not stop.is_set():
            try:
                full.put(item, timeout=_POLL_S)
                break
            except queue.Full:
                continue
        if isinstance(item, _Failure):
            return
