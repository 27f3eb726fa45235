"""WindowData: foreground / background windows cut from images and warped to a square
(Caffe's WindowDataLayer, the R-CNN fine-tuning input).

The window file (``window_data_param.source``) repeats, per image::

    # <image_index>
    <image path>              (root_folder is prepended)
    <channels> <height> <width>
    <num_windows>
    <class_index> <overlap> <x1> <y1> <x2> <y2>     (num_windows lines, inclusive corners)

A window with ``overlap >= fg_threshold`` is foreground (its class must be positive); one
with ``overlap < bg_threshold`` is background (label 0); others are unused. A batch holds
``batch_size - int(batch_size * fg_fraction)`` background windows and then the foreground
ones, each drawn uniformly; per window a mirror flag is drawn when ``mirror`` is set.

Each window, grown by ``context_pad`` (and squared in crop_mode "square"), is cut from the
colour image, clipped to it, warped to its share of ``crop_size`` x ``crop_size`` with
OpenCV's bilinear resize, flipped if mirrored, and written at its padding offset into a
zeroed crop (Caffe's maths, rounding included):

    s = crop / (crop - 2 * context_pad);  half = (x2 - x1 + 1) / 2;  centre = x1 + half
    x1' = round(centre - half * s),  x2' = round(centre + half * s)       (likewise y)
    out[c, pad_h + h, pad_w + w] = (pixel - mean[c, h + off + pad_h, w + off + pad_w]) * scale

where ``off = (mean_width - crop) / 2`` centres the mean image (mean_value: one per channel).
crop_size, mirror, mean_file and mean_value come from transform_param, as in Caffe; ``scale``
from window_data_param when set there (Caffe reads only that one), else transform_param.
"""
import math

import numpy as np

from pycaffe_cli.data.image import decode_image
from pycaffe_cli.data.linear_resize import resize_linear
from pycaffe_cli.data.prefetch import Batch
from pycaffe_cli.data.transformer import DataTransformer
from pycaffe_cli.errors import CaffeError, layer_error
from pycaffe_cli.io.input_files import IMAGE_LIMIT, read_input_bytes, read_input_text
from pycaffe_cli.layers.base import register
from pycaffe_cli.layers.base_data import (BasePrefetchingDataLayer, generator_state,
                                          restore_generator)
from pycaffe_cli.state_fields import state_generator, state_object
from pycaffe_cli.log import LOG

_F = np.float32


@register("WindowData", v1="WINDOW_DATA")
class WindowDataLayer(BasePrefetchingDataLayer):
    """window_data_param: source, batch_size, fg_threshold, bg_threshold, fg_fraction,
    context_pad, crop_mode, cache_images, root_folder, scale; transform_param: crop_size
    (required), mirror, mean_file / mean_value, scale."""

    exact_num_top = 2  # data and label, as in Caffe
    min_num_top = max_num_top = None

    def data_layer_setup(self, top):
        param = self.param.window_data_param
        transform = self.param.transform_param
        batch_size = self.positive_batch_size(param.batch_size, "window_data_param")
        self.warn_legacy_fields(param, "window_data_param", ("mean_file", "crop_size", "mirror"))
        if transform.crop_size <= 0:
            raise self.error("WindowData needs transform_param crop_size > 0")
        if param.crop_mode not in ("warp", "square"):
            raise self.error(f'crop_mode must be "warp" or "square", got "{param.crop_mode}"')
        if 2 * param.context_pad >= transform.crop_size:
            raise self.error(f"context_pad {param.context_pad} leaves nothing of crop_size "
                             f"{transform.crop_size}")
        LOG.info("Window data layer:\n  foreground (object) overlap threshold: %g\n"
                 "  background (non-object) overlap threshold: %g\n"
                 "  foreground sampling fraction: %g\n  cache_images: %d\n  root_folder: %s",
                 param.fg_threshold, param.bg_threshold, param.fg_fraction,
                 param.cache_images, param.root_folder)
        transformer = DataTransformer(transform, self.phase, self.name)
        images, fg, bg = self._read_windows(param)
        num_fg = int(_F(batch_size) * _F(param.fg_fraction))
        for windows, needed, kind in ((fg, num_fg, "foreground"),
                                      (bg, batch_size - num_fg, "background")):
            if needed and not len(windows):
                raise self.error(f"the window file has no {kind} windows, but each batch "
                                 f"needs {needed}")
        LOG.info("Amount of context padding: %d", param.context_pad)
        LOG.info("Crop mode: %s", param.crop_mode)
        shape = (batch_size, 3, transform.crop_size, transform.crop_size)
        LOG.info("output data size: %s", ",".join(str(d) for d in shape))
        mean = self._mean(transformer, transform.crop_size)
        scale = param.scale if param.HasField("scale") else transform.scale
        if not param.HasField("scale") and transform.scale != 1:
            LOG.warning('layer "%s": using transform_param scale %g (BVLC Caffe ignores it for '
                        'WindowData and reads only window_data_param scale)', self.name,
                        transform.scale)
        reader = WindowReader(self.name, images, fg, bg, param, transform, num_fg, mean,
                              _F(scale), self.seeded_generator(), self.output_labels)
        return reader, shape

    def _read_windows(self, param):
        """Image table [(path, cached bytes or None)] and fg / bg windows as rows of
        (image, label, x1, y1, x2, y2)."""
        try:
            tokens = read_input_text(param.source, "window file").split()
        except CaffeError as error:
            raise self.error(str(error)) from None
        if not tokens:
            raise self.error(f"window file {param.source!r} is empty")
        images, fg, bg, position = [], [], [], 0
        histogram = {0: 0}
        try:
            while position < len(tokens):
                if tokens[position] != "#":
                    raise ValueError(f"expected '#', got {tokens[position]!r}")
                index = int(tokens[position + 1])
                path = param.root_folder + tokens[position + 2]
                channels = int(tokens[position + 3])
                if channels != 3:
                    raise ValueError(f"image {path!r} is listed with {channels} channels; "
                                     "WindowData reads every image in colour (3)")
                dims = " ".join(tokens[position + 3:position + 6])
                count = int(tokens[position + 6])
                position += 7
                for _ in range(count):
                    label, overlap = int(tokens[position]), float(tokens[position + 1])
                    box = [int(t) for t in tokens[position + 2:position + 6]]
                    if len(box) < 4:
                        raise IndexError
                    position += 6
                    if _F(overlap) >= _F(param.fg_threshold):
                        if label <= 0:
                            raise ValueError(f"foreground window of {path!r} has class "
                                             f"{label}; it must be positive")
                        fg.append([index, label] + box)
                        histogram[label] = histogram.get(label, 0) + 1
                    elif _F(overlap) < _F(param.bg_threshold):
                        bg.append([index, 0] + box)
                        histogram[0] += 1
                images.append((path, self._cache(path) if param.cache_images else None))
                if index % 100 == 0:
                    LOG.info("num: %d %s %s windows to process: %d", index, path, dims, count)
        except (ValueError, IndexError) as error:
            detail = f": {error}" if str(error) else ""
            raise self.error(f"window file {param.source!r} is malformed near token "
                             f"{position}{detail}") from None
        for window in fg + bg:
            if not 0 <= window[0] < len(images):
                raise self.error(f"window file {param.source!r}: image index {window[0]} is "
                                 f"out of range; the file lists {len(images)} images and "
                                 "windows refer to them by their '# <index>' (from 0)")
        LOG.info("Number of images: %d", len(images))
        for label in sorted(histogram):
            LOG.info("class %d has %d samples", label, histogram[label])
        return (images, np.array(fg, np.int64).reshape(-1, 6),
                np.array(bg, np.int64).reshape(-1, 6))

    def _cache(self, path):
        try:
            return read_input_bytes(path, "image file", IMAGE_LIMIT)
        except CaffeError as error:
            raise self.error(str(error)) from None

    def _mean(self, transformer, crop):
        """(kind, array, offset): the mean image and its centring offset, or the values."""
        if transformer.mean_image is not None:
            mean = transformer.mean_image
            offset = (mean.shape[2] - crop) // 2
            if mean.shape[0] != 3 or offset < 0 or offset + crop > min(mean.shape[1:]):
                raise self.error(f"the mean file's shape {mean.shape} cannot be centred on "
                                 f"a 3 x {crop} x {crop} crop")
            return mean, offset
        values = transformer.mean_values
        if len(values) not in (0, 1, 3):
            raise self.error(f"specify either 1 mean_value or as many as channels: 3 (got "
                             f"{len(values)})")
        values = np.broadcast_to(values if len(values) else np.zeros(1, _F), (3,))
        return np.ascontiguousarray(values, _F).reshape(3, 1, 1), 0


class WindowReader:
    """Samples and warps windows on the prefetch thread; its position is its generator's
    state (windows are drawn with replacement, so nothing else moves)."""

    def __init__(self, layer_name, images, fg, bg, param, transform, num_fg, mean, scale, rng,
                 output_labels):
        self.layer_name = layer_name
        self._images, self._fg, self._bg = images, fg, bg
        self._batch_size, self._num_fg = int(param.batch_size), num_fg
        self._crop = int(transform.crop_size)
        self._mirror = bool(transform.mirror)
        self._context_pad = int(param.context_pad)
        self._square = param.crop_mode == "square"
        self._mean, self._mean_off = mean
        self._scale = scale
        self._rng = rng
        self._output_labels = output_labels

    def load_batch(self, recycled):
        shape = (self._batch_size, 3, self._crop, self._crop)
        data = recycled.data if recycled is not None else np.empty(shape, _F)
        data[...] = 0
        labels = np.empty(self._batch_size, _F)
        item = 0
        for windows, count in ((self._bg, self._batch_size - self._num_fg),
                               (self._fg, self._num_fg)):
            for _ in range(count):
                window = windows[self._rng.integers(0, len(windows))]
                flip = bool(self._mirror and self._rng.integers(0, 2))
                self._warp(window, flip, data[item])
                labels[item] = window[1]
                item += 1
        return Batch(data, labels if self._output_labels else None, self.position())

    def _load(self, image_index):
        path, cached = self._images[image_index]
        try:
            if cached is None:
                cached = read_input_bytes(path, "image file", IMAGE_LIMIT)
            return decode_image(cached, True, f"image file {path!r}")
        except CaffeError as error:
            raise layer_error(self.layer_name, str(error)) from None

    def _warp(self, window, flip, out):
        pixels = self._load(window[0])
        _, height, width = pixels.shape
        x1, y1, x2, y2 = (int(v) for v in window[2:])
        crop = self._crop
        out_h = out_w = crop
        pad_h = pad_w = 0
        if self._context_pad > 0 or self._square:
            x1, y1, x2, y2, out_h, out_w, pad_h, pad_w = _context_box(
                x1, y1, x2, y2, height, width, crop, self._context_pad, self._square, flip)
        if not (0 <= x1 <= x2 < width and 0 <= y1 <= y2 < height) or out_h < 1 or out_w < 1:
            raise layer_error(self.layer_name, f"window ({x1}, {y1}, {x2}, {y2}) does not fit "
                                               f"image {self._images[window[0]][0]!r} of "
                                               f"{width} x {height}")
        warped = resize_linear(np.ascontiguousarray(pixels[:, y1:y2 + 1, x1:x2 + 1]),
                               out_h, out_w)
        if flip:
            warped = warped[:, :, ::-1]
        off = self._mean_off
        if self._mean.shape[1] > 1:
            mean = self._mean[:, off + pad_h:off + pad_h + out_h, off + pad_w:off + pad_w + out_w]
        else:
            mean = self._mean
        out[:, pad_h:pad_h + out_h, pad_w:pad_w + out_w] = \
            (warped.astype(_F) - mean) * self._scale

    def position(self):
        return {"rng": generator_state(self._rng)}

    def restore(self, position):
        """Continue from a ``position()`` dict, checked first (state_fields.py)."""
        state_object(position, ("rng",))
        restore_generator(self._rng, state_generator(position, "rng", self._rng))


def _round(value):
    """C's round() of a float32: halves away from zero (exact in double)."""
    value = float(value)
    return int(math.copysign(math.floor(abs(value) + 0.5), value))


def _context_box(x1, y1, x2, y2, height, width, crop, context_pad, square, flip):
    """Caffe's context padding in float32: the grown, clipped box, the size its warp gets and
    where the warp goes in the crop."""
    context_scale = _F(crop) / _F(crop - 2 * context_pad)
    half_h, half_w = _F((y2 - y1 + 1) / 2.0), _F((x2 - x1 + 1) / 2.0)
    centre_x, centre_y = _F(x1) + half_w, _F(y1) + half_h
    if square:
        half_h = half_w = max(half_h, half_w)
    x1, x2 = _round(centre_x - half_w * context_scale), _round(centre_x + half_w * context_scale)
    y1, y2 = _round(centre_y - half_h * context_scale), _round(centre_y + half_h * context_scale)
    unclipped_h, unclipped_w = y2 - y1 + 1, x2 - x1 + 1
    pad_x1, pad_y1 = max(0, -x1), max(0, -y1)
    pad_x2, pad_y2 = max(0, x2 - width + 1), max(0, y2 - height + 1)
    x1, x2, y1, y2 = x1 + pad_x1, x2 - pad_x2, y1 + pad_y1, y2 - pad_y2
    scale_x, scale_y = _F(crop) / _F(unclipped_w), _F(crop) / _F(unclipped_h)
    out_w = _round(_F(x2 - x1 + 1) * scale_x)
    out_h = _round(_F(y2 - y1 + 1) * scale_y)
    pad_x1, pad_x2 = _round(_F(pad_x1) * scale_x), _round(_F(pad_x2) * scale_x)
    pad_y1 = _round(_F(pad_y1) * scale_y)
    pad_h = pad_y1
    pad_w = pad_x2 if flip else pad_x1  # a mirrored window mirrors its padding too
    out_h = min(out_h, crop - pad_h)
    out_w = min(out_w, crop - pad_w)
    return x1, y1, x2, y2, out_h, out_w, pad_h, pad_w
