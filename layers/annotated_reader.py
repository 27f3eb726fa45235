"""The reader and per-image augmentation of SSD's AnnotatedData layer (layers/annotated_data.py
describes the steps), also used by Data for SSD's resize_param and crop_h/crop_w."""
import numpy as np
from google.protobuf.message import DecodeError

from pycaffe_cli.data.annotation import F32, Boxes, clip_boxes, transform_boxes
from pycaffe_cli.data.distort import apply_distort, check_distort_param
from pycaffe_cli.data.noise import apply_noise
from pycaffe_cli.data.prefetch import Batch
from pycaffe_cli.data.resize import apply_resize, check_resize_param, new_size
from pycaffe_cli.data.transformer import DataTransformer
from pycaffe_cli.detection.sampling import generate_batch_samples
from pycaffe_cli.errors import CaffeError, layer_error
from pycaffe_cli.layers.datum_reader import DatumReader
from pycaffe_cli.proto import caffe_pb2

_RAW_EXPAND_FILL = 32   # the fork expands raw Datums into a buffer of ' ' characters


class AnnotatedDatumReader(DatumReader):
    """DatumReader for AnnotatedDatums (or, ``plain``, Datums seen as AnnotatedDatums without
    boxes): each item goes through the Augmenter."""

    def __init__(self, layer_name, source, db, augmenter, batch_size, rng, output_labels,
                 plain=False):
        super().__init__(layer_name, source, db, augmenter.transformer, batch_size, rng,
                         output_labels)
        self._augmenter = augmenter
        self._plain = plain   # the records are Datums (the Data layer with SSD's resize)
        self.boxes = False

    def read_datum(self):
        if self._plain:
            return caffe_pb2.AnnotatedDatum(datum=super().read_datum())
        datum = caffe_pb2.AnnotatedDatum()
        try:
            datum.ParseFromString(self._cursor.value())
        except (DecodeError, RuntimeError, ValueError) as error:
            raise self._record_error(f"not a valid AnnotatedDatum ({error})") from None
        return datum

    def _pixels(self, anno_datum):
        try:
            return self._transformer.datum_to_array(anno_datum.datum)
        except CaffeError as error:
            raise self._record_error(error) from None

    def item_shape(self, anno_datum, what):
        try:
            return self._augmenter.output_shape(self._pixels(anno_datum).shape)
        except CaffeError as error:
            raise layer_error(self.layer_name, f"{what}: {error}") from None

    def load_batch(self, recycled):
        self._skip_other_ranks()
        shape = (self._batch_size,) + self.item_shape(self.read_datum(), "a record")
        if recycled is not None and recycled.data.shape == shape:
            data = recycled.data
        else:
            data = np.empty(shape, np.float32)
        labels = np.empty(self._batch_size, np.float32)
        rows = []
        for index in range(self._batch_size):
            self._skip_other_ranks()
            anno_datum = self.read_datum()
            pixels = self._pixels(anno_datum)
            try:
                image, boxes = self._augmenter.process(anno_datum, pixels, self._rng,
                                                       self.boxes)
                if image.shape != shape[1:]:
                    raise CaffeError(
                        f"the image comes out {image.shape[1]} x {image.shape[2]} but the "
                        f"batch's first is {shape[2]} x {shape[3]}; set resize_param (or "
                        "crop_size) so that every image has one size")
            except CaffeError as error:
                raise self._record_error(error) from None
            data[index] = image
            labels[index] = anno_datum.datum.label
            if boxes is not None:
                rows.append(boxes.label_rows(index))
            self.advance()
        label = labels
        if self.boxes:
            label = np.concatenate(rows) if rows else np.zeros((0, 8), F32)
            if not len(label):
                label = np.full((1, 8), -1, F32)
            label = label.reshape(1, 1, -1, 8)
        return Batch(data, label if self._output_labels else None, self.position())


class Augmenter:
    """One item's way through SSD's augmentation (see the module docstring).

    Args:
        param: caffe.TransformationParameter.
        phase: caffe.TRAIN or caffe.TEST.
        layer_name: for errors.
        batch_samplers: list of caffe.BatchSampler.
    """

    def __init__(self, param, phase, layer_name, batch_samplers=()):
        self.transformer = DataTransformer(param, phase, layer_name)
        self.param = param
        self.phase = phase
        self.layer_name = layer_name
        self.batch_samplers = list(batch_samplers)
        self.resize = param.resize_param if param.HasField("resize_param") else None
        self.distort = param.distort_param if param.HasField("distort_param") else None
        self.expand = param.expand_param if param.HasField("expand_param") else None
        self.noise = param.noise_param if param.HasField("noise_param") else None
        self.emit = param.emit_constraint if param.HasField("emit_constraint") else None
        if param.crop_size:
            self.crop = (int(param.crop_size), int(param.crop_size))
        else:
            self.crop = (int(param.crop_h), int(param.crop_w))
        if (self.crop[0] > 0) != (self.crop[1] > 0):
            raise self._error(f"set both crop_h and crop_w (got crop_h {param.crop_h}, "
                              f"crop_w {param.crop_w})")
        if self.resize is not None:
            problem = check_resize_param(self.resize)
            if problem:
                raise self._error(problem)
        if self.expand is not None and not self.expand.max_expand_ratio > 1:
            raise self._error(f"expand_param max_expand_ratio must be greater than 1 (got "
                              f"{self.expand.max_expand_ratio:g})")

    def _error(self, message):
        return layer_error(self.layer_name, message)

    # --- shapes ----------------------------------------------------------------------------
    def output_shape(self, item_shape):
        """InferBlobShape: (C, H, W) out of an image of (C, h, w) ``item_shape``.

        Raises:
            CaffeError (naming no layer): the image is smaller than the crop.
        """
        channels, height, width = item_shape
        if self.resize is not None:
            height, width = new_size(self.resize, height, width)
        crop_h, crop_w = self.crop
        if height < crop_h or width < crop_w:
            raise CaffeError(f"the crop ({crop_h} x {crop_w}) is larger than the image "
                             f"({height} x {width})")
        return (channels, crop_h or height, crop_w or width)

    # --- one item --------------------------------------------------------------------------
    def process(self, anno_datum, pixels, rng, with_boxes=True):
        """Distort, expand, sample, transform one AnnotatedDatum whose (C, H, W) pixels are
        ``pixels``. Returns (float32 (C, H', W') image, Boxes or None)."""
        raw = not anno_datum.datum.encoded
        boxes = Boxes.from_datum(anno_datum)
        if self.distort is not None:
            pixels = self._distorted(pixels, rng)
        if self.expand is not None:
            pixels, boxes = self._expanded(pixels, boxes, rng, raw)
        if self.batch_samplers:
            samples = generate_batch_samples(boxes, self.batch_samplers, rng)
            if len(samples):
                pixels, boxes = self._cropped(pixels, boxes, samples[rng.integers(len(samples))])
        image, boxes = self._transformed(pixels, boxes, rng, raw)
        return image, (boxes if with_boxes else None)

    def _distorted(self, pixels, rng):
        if pixels.dtype != np.uint8:
            raise CaffeError("distort_param needs 8-bit images, not float_data")
        problem = check_distort_param(self.distort, pixels.shape[0])
        if problem:
            raise CaffeError(problem)
        distorted = apply_distort(np.ascontiguousarray(pixels.transpose(1, 2, 0)),
                                  self.distort, rng)
        return np.ascontiguousarray(distorted.transpose(2, 0, 1))

    def _noised(self, pixels, rng):
        """ApplyNoise after the resize, before the crop (pycaffe_cli/data/noise.py); the fork
        does so for encoded images only, pycaffe for raw 8-bit ones too."""
        if pixels.dtype != np.uint8:
            raise CaffeError("noise_param needs 8-bit images, not float_data")
        noised = apply_noise(np.ascontiguousarray(pixels.transpose(1, 2, 0)), self.noise, rng)
        return np.ascontiguousarray(noised.transpose(2, 0, 1))

    def _expanded(self, pixels, boxes, rng, raw):
        """ExpandImage: the image on a larger canvas, the boxes projected onto it."""
        if rng.random() > self.expand.prob:
            return pixels, boxes
        max_ratio = self.expand.max_expand_ratio
        if abs(max_ratio - 1.0) < 1e-2:
            return pixels, boxes
        ratio = F32(rng.uniform(1.0, max_ratio))
        channels, img_h, img_w = pixels.shape
        height, width = int(F32(img_h) * ratio), int(F32(img_w) * ratio)
        h_off = np.floor(F32(rng.uniform(0.0, float(height - img_h))))
        w_off = np.floor(F32(rng.uniform(0.0, float(width - img_w))))
        src = np.array([-w_off / F32(img_w), -h_off / F32(img_h),
                        (F32(width) - w_off) / F32(img_w), (F32(height) - h_off) / F32(img_h)],
                       F32)
        canvas = np.empty((channels, height, width), pixels.dtype)
        canvas[:] = self._expand_fill(channels, raw, pixels.dtype)[:, None, None]
        top, left = int(h_off), int(w_off)
        canvas[:, top:top + img_h, left:left + img_w] = pixels
        return canvas, transform_boxes(boxes, src, self.emit)

    def _expand_fill(self, channels, raw, dtype):
        if raw:
            return np.full(channels, _RAW_EXPAND_FILL, dtype)
        values = self.transformer.mean_values
        if not len(values):
            return np.zeros(channels, dtype)
        if len(values) not in (1, channels):
            raise CaffeError(f"specify either 1 mean_value or as many as channels: "
                             f"{channels} (got {len(values)})")
        values = np.broadcast_to(values.astype(np.float64), (channels,))
        if dtype == np.uint8:
            return np.clip(np.rint(values), 0, 255).astype(np.uint8)
        return values.astype(dtype)

    def _cropped(self, pixels, boxes, sample):
        """CropImage: the pixels inside the (clipped) sampled box, the boxes projected."""
        clipped = clip_boxes(sample.reshape(1, 4))[0][0]
        _, height, width = pixels.shape
        scaled = clipped * np.array([width, height, width, height], F32)
        w_off, h_off = int(scaled[0]), int(scaled[1])
        crop_w, crop_h = int(scaled[2] - scaled[0]), int(scaled[3] - scaled[1])
        if crop_w <= 0 or crop_h <= 0:
            raise CaffeError(f"a batch_sampler crop of the {height} x {width} image is empty "
                             f"({crop_h} x {crop_w}); raise the sampler's min_scale")
        crop = pixels[:, h_off:h_off + crop_h, w_off:w_off + crop_w]
        return crop, transform_boxes(boxes, clipped, self.emit)

    def _transformed(self, pixels, boxes, rng, raw=False):
        """The fork's Transform with TransformAnnotation: mirror draw, resize, noise, crop,
        mean, scale."""
        mirror = bool(self.param.mirror) and bool(rng.integers(2))
        img_h, img_w = pixels.shape[1:]
        if self.resize is not None:
            if pixels.dtype != np.uint8:
                raise CaffeError("resize_param needs 8-bit images, not float_data")
            pixels = apply_resize(pixels, self.resize, rng)
        if self.noise is not None:
            pixels = self._noised(pixels, rng)
        channels, height, width = pixels.shape
        crop_h, crop_w = self.crop
        if height < crop_h or width < crop_w:
            raise CaffeError(f"the crop ({crop_h} x {crop_w}) is larger than the image "
                             f"({height} x {width})")
        h_off = w_off = 0
        out_h, out_w = height, width
        if crop_h and crop_w:
            out_h, out_w = crop_h, crop_w
            if self.phase == caffe_pb2.TRAIN:
                h_off = int(rng.integers(height - crop_h + 1))
                w_off = int(rng.integers(width - crop_w + 1))
            else:
                h_off, w_off = (height - crop_h) // 2, (width - crop_w) // 2
        src = np.array([F32(w_off) / F32(width), F32(h_off) / F32(height),
                        F32(w_off + out_w) / F32(width), F32(h_off + out_h) / F32(height)], F32)
        image = pixels[:, h_off:h_off + out_h, w_off:w_off + out_w].astype(F32)
        mean_image = self.transformer.mean_image
        if raw and mean_image is not None:
            # the fork's raw-Datum path: the mean image is cropped with the pixels
            if mean_image.shape != pixels.shape:
                raise CaffeError(f"the mean file's shape {mean_image.shape} does not match "
                                 f"the image's {pixels.shape} (C, H, W)")
            image = image - mean_image[:, h_off:h_off + out_h, w_off:w_off + out_w]
        if mirror:
            image = image[:, :, ::-1]
        image = self._normalized(image, mean_subtracted=raw)
        boxes = transform_boxes(boxes, src, self.emit, mirror, self.resize, (img_h, img_w))
        return image, boxes

    def _normalized(self, image, mean_subtracted=False):
        """(pixel - mean) * scale; a mean image is subtracted at the output positions, as the
        fork does for decoded images, and must have the output's shape."""
        transformer = self.transformer
        channels = image.shape[0]
        if transformer.mean_image is not None:
            if not mean_subtracted:
                if transformer.mean_image.shape != image.shape:
                    raise CaffeError(f"the mean file's shape {transformer.mean_image.shape} "
                                     f"does not match the transformed image's {image.shape} "
                                     "(C, H, W)")
                image = image - transformer.mean_image
        elif len(transformer.mean_values):
            values = transformer.mean_values
            if len(values) not in (1, channels):
                raise CaffeError(f"specify either 1 mean_value or as many as channels: "
                                 f"{channels} (got {len(values)})")
            image = image - np.broadcast_to(values, (channels,))[:, None, None]
        return (image * transformer.scale).astype(F32)
