"""BasePrefetchingDataLayer: what Data, ImageData and WindowData share (Caffe's
base_data_layer.cpp).

A subclass builds a *reader* in ``data_layer_setup`` (see pycaffe_cli/data/prefetch.py) and
returns the shape of its first batch; this class runs the reader on a background thread
(``data_param.prefetch`` batches ahead, default 4, as Caffe sizes its queue for every
prefetching layer) and copies one finished batch into the tops per ``forward``. Tops: data,
and optionally label.

Exact resume: ``get_state`` is the reader's position after the last batch *handed to
forward*, never after the batches still waiting in the queue; ``set_state`` stops the thread,
moves the reader there and starts it again. Caffe itself restarts data layers from the start.

GPU mode: the prefetch thread also stages each finished batch in pinned (page-locked) host
memory and copies it to device arrays of its own on a stream of its own (Caffe's
async_gpu_push), so ``forward`` only makes a device-to-device copy into the tops. Reading,
decoding and staging overlap the net's work. The copy itself does not run beside the net's
kernels: numba's streams synchronise with the default stream, which is what keeps a recycled
batch's device arrays from being refilled before ``forward``'s copy out of them has run.
"""
import weakref

import numpy as np

from pycaffe_cli import backend
from pycaffe_cli.data.prefetch import Prefetcher
from pycaffe_cli.layers.base import Layer
from pycaffe_cli.log import LOG
from pycaffe_cli.sizes import FLOAT_BYTES, check_bytes, checked_count

_LEGACY_TRANSFORM_FIELDS = ("scale", "mean_file", "crop_size", "mirror")


class BasePrefetchingDataLayer(Layer):
    """Tops: data (N, C, H, W) and an optional label (N,). No bottoms, no backward."""

    exact_num_bottom = 0
    min_num_top = 1
    max_num_top = 2

    def layer_setup(self, bottom, top):
        self.output_labels = len(top) == 2
        depth = int(self.param.data_param.prefetch)
        if depth < 1:
            raise self.error(f"data_param prefetch must be at least 1 (got {depth})")
        reader, data_shape = self.data_layer_setup(top)
        self._check_queue_size(data_shape, depth)
        self._shapes = (tuple(data_shape), (data_shape[0],))
        self._position = reader.position()
        self._prefetcher = Prefetcher(reader, depth, self.name, after_load=_push_to_device)
        self._finalizer = weakref.finalize(self, self._prefetcher.stop)
        self._prefetcher.start()

    @staticmethod
    def _check_queue_size(data_shape, depth):
        """Refuse a batch shape before the thread allocates ``depth`` batches of it."""
        count = checked_count(data_shape)
        dims = " ".join(str(d) for d in data_shape)
        check_bytes(count * depth * FLOAT_BYTES,
                    f"the prefetch queue ({depth} batches of shape {dims})")

    def data_layer_setup(self, top):
        """Read params, build the reader; return (reader, shape of the first data batch)."""
        raise NotImplementedError

    # --- helpers for subclasses ----------------------------------------------------------------
    def warn_legacy_fields(self, own_param, own_name, fields=_LEGACY_TRANSFORM_FIELDS):
        """Caffe ignores the old transformation fields of a non-V1 layer's own parameter
        (the V1 upgrade moves them to transform_param); say so instead of staying silent."""
        for name in fields:
            if own_param.HasField(name):
                LOG.warning('layer "%s": %s.%s is ignored (as in Caffe); set it in '
                            'transform_param', self.name, own_name, name)

    def positive_batch_size(self, value, param_name):
        if value <= 0:
            raise self.error(f"{param_name} batch_size must be positive (got {value})")
        return int(value)

    @staticmethod
    def seeded_generator():
        """A generator of the layer's own, seeded from the shared one (one draw)."""
        return np.random.default_rng(int(backend.rng().integers(0, 2 ** 63)))

    @staticmethod
    def random_skip(rand_skip):
        """Caffe's rand_skip: a count uniform in [0, rand_skip), drawn from the shared rng."""
        return int(backend.rng().integers(0, rand_skip)) if rand_skip else 0

    # --- the layer contract ------------------------------------------------------------------
    def reshape(self, bottom, top):
        top[0].reshape(self._shapes[0])
        if self.output_labels:
            top[1].reshape(self._shapes[1])

    def forward_cpu(self, bottom, top):
        batch = self._prefetcher.next_batch()
        self._shapes = (batch.data.shape, (batch.data.shape[0],))
        top[0].reshape(batch.data.shape)
        top[0].data[...] = batch.data
        if self.output_labels:
            top[1].reshape(batch.label.shape)
            top[1].data[...] = batch.label
        self._position = batch.position
        self._prefetcher.recycle(batch)

    def forward_gpu(self, bottom, top):
        from pycaffe_cli.cuda import memory
        batch = self._prefetcher.next_batch()
        self._shapes = (batch.data.shape, (batch.data.shape[0],))
        top[0].reshape(batch.data.shape)
        if "data" not in batch.device:   # made before GPU mode was switched on
            _push_to_device(batch)
        memory.copy(batch.device["data"], top[0].mutable_gpu_data)
        if self.output_labels:
            top[1].reshape(batch.label.shape)
            memory.copy(batch.device["label"], top[1].mutable_gpu_data)
        self._position = batch.position
        self._prefetcher.recycle(batch)

    @property
    def prefetcher(self):
        return self._prefetcher

    def close(self):
        """Stop the prefetch thread (also done when the layer is garbage collected)."""
        self._finalizer()

    # --- resumable state -----------------------------------------------------------------------
    def get_state(self):
        return dict(self._position)

    def set_state(self, state):
        self._prefetcher.stop()
        try:
            self._prefetcher.reader.restore(state)
        except Exception:
            self._prefetcher.reader.restore(self._position)  # the last good position
            self._prefetcher.start()
            raise
        self._position = dict(state)
        self._prefetcher.start()


def _push_to_device(batch):
    """In GPU mode, copy ``batch``'s arrays to the device through pinned staging buffers
    (kept in ``batch.device`` and reused when the batch is recycled); else drop stale ones."""
    if backend.mode() is not backend.Mode.GPU:
        batch.device.clear()
        return
    from pycaffe_cli.cuda import memory
    memory.use_device(backend.device())   # this thread's CUDA context: the net's device
    if "stream" not in batch.device:
        batch.device["stream"] = memory.stream()
    stream = batch.device["stream"]
    for key, host in (("data", batch.data), ("label", batch.label)):
        if host is None:
            continue
        flat = host.reshape(-1)
        staging = batch.device.get(f"{key}_pinned")
        if staging is None or staging.size != flat.size:
            staging = batch.device[f"{key}_pinned"] = memory.pinned_empty(flat.size)
            batch.device[key] = memory.empty(flat.size)
        staging[:] = flat
        batch.device[key].copy_to_device(staging, stream=stream)
    stream.synchronize()


def generator_state(rng):
    """JSON-able state of a numpy Generator (None for none)."""
    return None if rng is None else rng.bit_generator.state


def restore_generator(rng, state):
    if rng is not None and state is not None:
        rng.bit_generator.state = state
