"""DatumReader: the prefetch thread's reader of Data layers (layers/data.py) and, through
AnnotatedDatumReader (layers/annotated_reader.py), of AnnotatedData: batches of records in key
order, sharded across data-parallel ranks, with a position that resumes exactly."""
import numpy as np

from pycaffe_cli.data.prefetch import Batch
from pycaffe_cli.data.transformer import parse_datum, stage_images
from pycaffe_cli.errors import CaffeError, layer_error
from pycaffe_cli.layers.base_data import generator_state, restore_generator
from pycaffe_cli.log import LOG
from pycaffe_cli.state_fields import state_generator, state_hex, state_int, state_object
from pycaffe_cli.threads import map_in_order


def _serially(function, items):
    return [function(item) for item in items]


class DatumReader:
    """Reads batches of Datums on the prefetch thread; its position is the next record's key
    and the state of the layer's random generator."""

    def __init__(self, layer_name, source, db, transformer, batch_size, rng, output_labels):
        self.layer_name = layer_name
        self.source = source
        self._db = db
        self._cursor = db.cursor()
        self._transformer = transformer
        self._batch_size = batch_size
        self._rng = rng
        self._output_labels = output_labels
        self._stage = None
        self._offset, self._count, self._rank = 0, 1, 0
        if not self._cursor.valid():
            raise layer_error(layer_name, f"database {source!r} is empty")

    def _record_error(self, error):
        key = self._cursor.key().decode(errors="replace")
        return layer_error(self.layer_name, f"record {key!r} of {self.source!r}: {error}")

    def read_datum(self):
        """The Datum at the cursor (the cursor stays there)."""
        try:
            return parse_datum(self._cursor.value())
        except CaffeError as error:
            raise self._record_error(error) from None

    def shard(self, count, rank):
        """Read only the records ``rank``, ``rank + count``, ... (``count`` ranks)."""
        self._count, self._rank = count, rank

    def advance(self):
        key = self._cursor.key()
        try:
            self._cursor.next()
            if not self._cursor.valid():
                LOG.info("Restarting data prefetching from start.")
                self._cursor.seek_to_first()
        except CaffeError as error:   # a damaged database: say where the reading stopped
            raise layer_error(self.layer_name, f"{error} (after record "
                                               f"{key.decode(errors='replace')!r})") from None
        self._offset += 1

    def _skip_other_ranks(self):
        """Caffe's ``while (Skip()) Next();``: pass the records of the other ranks."""
        while self._offset % self._count != self._rank:
            self.advance()

    def skip(self, count):
        for _ in range(count):
            self.advance()

    def load_batch(self, recycled):
        datums = []
        labels = np.empty(self._batch_size, np.float32)
        for index in range(self._batch_size):
            self._skip_other_ranks()
            datums.append((self.read_datum(), self._cursor.key()))
            labels[index] = datums[-1][0].label
            self.advance()
        # Encoded records are decoded on the side threads; raw ones are only a view of bytes.
        convert = map_in_order if any(datum.encoded for datum, _ in datums) else _serially
        images = convert(self._to_array, datums)
        try:
            self._stage, sizes = stage_images(images, self._stage)
        except CaffeError as error:
            raise layer_error(self.layer_name, str(error)) from None
        shape = (self._batch_size,) + self._transformer.output_shape(images[0].shape)
        if recycled is not None and recycled.data.shape == shape:
            data = recycled.data
        else:
            data = np.empty(shape, np.float32)
        self._transformer.transform_batch(self._stage, data, sizes, self._rng)
        return Batch(data, labels if self._output_labels else None, self.position())

    def _to_array(self, datum_and_key):
        datum, key = datum_and_key
        try:
            return self._transformer.datum_to_array(datum)
        except CaffeError as error:
            raise layer_error(self.layer_name, f"record {key.decode(errors='replace')!r} of "
                                               f"{self.source!r}: {error}") from None

    def position(self):
        position = {"key": self._cursor.key().hex(), "rng": generator_state(self._rng)}
        if self._count > 1:
            position["offset"] = self._offset % self._count
        return position

    def restore(self, position):
        """Continue from a ``position()`` dict, every field checked first (state_fields.py)."""
        state_object(position, ("key", "rng") + (("offset",) if self._count > 1 else ()))
        key = state_hex(position, "key")
        rng_state = state_generator(position, "rng", self._rng)
        offset = 0
        if self._count > 1:
            offset = state_int(position, "offset", 0, self._count, f" ({self._count} ranks)")
        if not self._cursor.seek(key):
            raise layer_error(self.layer_name, f"saved data position: database "
                                               f"{self.source!r} has no record {key!r}")
        restore_generator(self._rng, rng_state)
        self._offset = offset
