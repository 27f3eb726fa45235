"""ImageData: batches of image files named in a list file (Caffe's ImageDataLayer).

``image_data_param.source`` has one ``<path> <label>`` per line; the path may contain spaces,
the label follows the LAST space (Caffe's ``find_last_of(' ')``). Each image is read from
``root_folder + path`` (plain concatenation, as in Caffe), decoded in colour (BGR) or grey
(``is_color``), resized to ``new_height`` x ``new_width`` when both are set (OpenCV's
bilinear, see pycaffe_cli/data/linear_resize.py), then transformed by ``transform_param``:

    top[0][i] = transform(image(list[order[pos + i]])),  top[1][i] = label(list[order[pos + i]])

With ``shuffle`` the order is a fresh random permutation at set-up and at every pass over the
list (drawn from the layer's own generator, seeded from the shared one); without, it is the
file order. ``rand_skip`` starts at a random line in [0, rand_skip). A missing or unreadable
image is an error naming the file (Caffe stops there too).
"""
import re

import numpy as np

from pycaffe_cli.data.image import read_image
from pycaffe_cli.data.prefetch import Batch
from pycaffe_cli.data.transformer import DataTransformer, stage_images
from pycaffe_cli.errors import CaffeError, layer_error
from pycaffe_cli.io.input_files import read_input_text
from pycaffe_cli.layers.base import register
from pycaffe_cli.layers.base_data import (BasePrefetchingDataLayer, generator_state,
                                          restore_generator)
from pycaffe_cli.log import LOG
from pycaffe_cli.state_fields import StateFieldError, state_generator, state_int, state_object
from pycaffe_cli.threads import map_in_order

# Caffe reads a label with atoi into an int: negative labels are fine, 2^40 is not
INT_MIN, INT_MAX = -2 ** 31, 2 ** 31 - 1
_LABEL = re.compile(r"[+-]?[0-9]+")   # int() would also take "1_000" and other scripts' digits


@register("ImageData", v1="IMAGE_DATA")
class ImageDataLayer(BasePrefetchingDataLayer):
    """image_data_param: source, root_folder, batch_size (default 1), new_height, new_width,
    is_color (default true), shuffle, rand_skip; plus transform_param."""

    exact_num_top = 2  # data and label, as in Caffe
    min_num_top = max_num_top = None

    def data_layer_setup(self, top):
        param = self.param.image_data_param
        batch_size = self.positive_batch_size(param.batch_size, "image_data_param")
        self.warn_legacy_fields(param, "image_data_param")
        if (param.new_height > 0) != (param.new_width > 0):
            raise self.error("new_height and new_width must be set at the same time (got "
                             f"{param.new_height} and {param.new_width})")
        transformer = DataTransformer(self.param.transform_param, self.phase, self.name)
        lines = self._read_list(param.source)
        rng = self.seeded_generator() if transformer.needs_rand else None
        order_rng = None
        if param.shuffle:
            LOG.info("Shuffling data")
            order_rng = self.seeded_generator()
        LOG.info("A total of %d images.", len(lines))
        reader = ImageListReader(self.name, lines, param, transformer, batch_size, rng,
                                 order_rng, self.output_labels)
        skip = self.random_skip(param.rand_skip)
        if skip:
            LOG.info("Skipping first %d data points.", skip)
            if skip >= len(lines):
                raise self.error(f"not enough points to skip: rand_skip drew {skip}, the list "
                                 f"has {len(lines)} images")
            reader.index = skip
        first = reader.read(reader.index)
        shape = (batch_size,) + transformer.output_shape(first.shape)
        LOG.info("output data size: %s", ",".join(str(d) for d in shape))
        return reader, shape

    def _read_list(self, source):
        LOG.info("Opening file %s", source)
        try:
            text = read_input_text(source, "image list")
        except CaffeError as error:
            raise self.error(str(error)) from None
        lines = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            path, space, label = line.rstrip("\r").rpartition(" ")
            if not space or not _LABEL.fullmatch(label):
                raise self.error(f"{source}:{number}: expected '<path> <integer label>', got "
                                 f"{line!r}")
            value = _int_label(label)
            if value is None:
                shown = label if len(label) <= 24 else f"{label[:12]}...({len(label)} digits)"
                raise self.error(f"{source}:{number}: label {shown} is outside the range of a "
                                 f"32-bit int, which Caffe reads labels as ([{INT_MIN}, "
                                 f"{INT_MAX}])")
            lines.append((path, value))
        if not lines:
            raise self.error(f"image list {source!r} names no images")
        return lines


def _int_label(label):
    """The value of an integer label, or None outside Caffe's int (without int() of a long
    string, which Python refuses past 4300 digits)."""
    if len(label.lstrip("+-").lstrip("0")) > len(str(INT_MAX)):
        return None
    value = int(label)
    return value if INT_MIN <= value <= INT_MAX else None


class ImageListReader:
    """Reads batches of listed images on the prefetch thread. Its position: the next line's
    index in the current order, the order generator's state before this pass's permutation
    was drawn, and the transform generator's state."""

    def __init__(self, layer_name, lines, param, transformer, batch_size, rng, order_rng,
                 output_labels):
        self.layer_name = layer_name
        self._paths = [path for path, _ in lines]
        self._labels = np.array([label for _, label in lines], np.float32)
        self._root = param.root_folder
        self._size = (int(param.new_height), int(param.new_width))
        self._color = bool(param.is_color)
        self._transformer = transformer
        self._batch_size = batch_size
        self._rng = rng
        self._order_rng = order_rng
        self._output_labels = output_labels
        self._stage = None
        self.index = 0
        self._new_pass()

    def _new_pass(self):
        if self._order_rng is None:
            self._pass_state = None
            self._order = np.arange(len(self._paths))
        else:
            self._pass_state = self._order_rng.bit_generator.state
            self._order = self._order_rng.permutation(len(self._paths))

    def read(self, index):
        """The pixels of the image at ``index`` in the current order."""
        return self._read_path(self._root + self._paths[self._order[index]])

    def _read_path(self, path):
        try:
            return read_image(path, self._size[0], self._size[1], self._color)
        except CaffeError as error:
            raise layer_error(self.layer_name, str(error)) from None

    def load_batch(self, recycled):
        paths = []
        labels = np.empty(self._batch_size, np.float32)
        for item in range(self._batch_size):
            paths.append(self._root + self._paths[self._order[self.index]])
            labels[item] = self._labels[self._order[self.index]]
            self.index += 1
            if self.index == len(self._paths):
                LOG.debug("Restarting data prefetching from start.")
                self.index = 0
                self._new_pass()
        images = map_in_order(self._read_path, paths)   # decoded on the side threads
        try:
            self._stage, sizes = stage_images(images, self._stage)
        except CaffeError as error:
            raise layer_error(self.layer_name, str(error)) from None
        shape = (self._batch_size,) + self._transformer.output_shape(images[0].shape)
        data = recycled.data if recycled is not None and recycled.data.shape == shape else \
            np.empty(shape, np.float32)
        self._transformer.transform_batch(self._stage, data, sizes, self._rng)
        return Batch(data, labels if self._output_labels else None, self.position())

    def position(self):
        return {"index": self.index, "pass_rng": self._pass_state,
                "rng": generator_state(self._rng), "images": len(self._paths)}

    def restore(self, position):
        """Continue from a ``position()`` dict, every field checked first (state_fields.py)."""
        state_object(position, ("index", "pass_rng", "rng", "images"))
        images = len(self._paths)
        if state_int(position, "images", 0, 2 ** 31) != images:
            raise StateFieldError("images", f"saved for a list of {position['images']} "
                                            f"images; this layer's list has {images}")
        index = state_int(position, "index", 0, images, " (the images in the list)")
        pass_state = state_generator(position, "pass_rng", self._order_rng)
        rng_state = state_generator(position, "rng", self._rng)
        if self._order_rng is not None:
            self._order_rng.bit_generator.state = pass_state
        self._new_pass()
        restore_generator(self._rng, rng_state)
        self.index = index
