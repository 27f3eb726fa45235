"""DataTransformer: Caffe's crop / mirror / mean / scale preprocessing, a whole batch at once.

For every image ``i`` of a batch and output position ``(c, y, x)`` (Caffe's
data_transformer.cpp):

    sy = h_off[i] + y,   sx = w_off[i] + (crop_w - 1 - x if mirror[i] else x)
    out[i, c, y, x] = (pixel[i, c, sy, sx] - mean[c, sy, sx]) * scale      (mean_file)
                    = (pixel[i, c, sy, sx] - mean_value[c]) * scale        (mean_value)
                    =  pixel[i, c, sy, sx] * scale                         (neither)

so the mean image is cropped at the image's own offsets and never mirrored. Crop offsets are
random in TRAIN (``h_off`` uniform in ``[0, H - crop]``) and centred in TEST
(``(H - crop) // 2``); mirroring is random in both phases when ``mirror`` is set, as in Caffe.
All random numbers of a batch are drawn up front (mirror flags, then row offsets, then column
offsets), from the generator the caller hands in, so a prefetch thread stays deterministic.
The per-pixel work is one numba kernel over the batch (no Python loop over pixels).

Encoded Datums are decoded like Caffe's DecodeDatumToCVMat(Native): ``force_color`` gives
3 channels (BGR), ``force_gray`` 1 channel, neither keeps the image's own kind.
"""
import numpy as np
from google.protobuf.message import DecodeError
from numba import njit, prange

from pycaffe_cli.blob import read_only
from pycaffe_cli.data.image import decode_image
from pycaffe_cli.errors import CaffeError, layer_error
from pycaffe_cli.io.blob_proto import blob_proto_to_array
from pycaffe_cli.io.prototxt import read_blob_proto
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2

_NO_MEAN, _MEAN_VALUES, _MEAN_IMAGE = 0, 1, 2
_NO_MEAN_OPERAND = read_only(np.zeros((1, 1, 1), np.float32))  # the kernel reads none


class DataTransformer:
    """Preprocess image batches as a ``transform_param`` describes.

    Args:
        param: caffe.TransformationParameter.
        phase: caffe.TRAIN or caffe.TEST.
        layer_name: the owning layer's name, for error messages.
    """

    def __init__(self, param, phase, layer_name="?"):
        self.param = param
        self.phase = phase
        self.layer_name = layer_name
        self.crop_size = int(param.crop_size)
        self.scale = np.float32(param.scale)
        self.mirror = bool(param.mirror)
        if param.force_color and param.force_gray:
            raise self._error("cannot set both force_color and force_gray")
        if param.HasField("mean_file") and len(param.mean_value):
            raise self._error("cannot specify mean_file and mean_value at the same time")
        self.mean_image = None
        if param.HasField("mean_file"):
            self.mean_image = self._load_mean(param.mean_file)
        self.mean_values = np.asarray(param.mean_value, np.float32)
        self._warned_force = False

    def _error(self, message):
        return layer_error(self.layer_name, message)

    def _load_mean(self, path):
        LOG.info("Loading mean file from: %s", path)
        try:
            mean = blob_proto_to_array(read_blob_proto(path, what="mean file"))
        except CaffeError as error:
            # a layer error, so that the net's loader can point at the layer's line
            message = str(error)
            if path not in message:
                message = f"mean file {path!r}: {message}"
            raise self._error(message) from None
        if mean.ndim == 4:
            mean = mean[0]
        if mean.ndim != 3:
            raise self._error(f"mean file {path!r} must hold a (1, C, H, W) blob, got shape "
                              f"{mean.shape}")
        finite = np.isfinite(mean)
        if not finite.all():   # Caffe subtracts it without a word; every pixel becomes NaN
            LOG.warning(f'layer "{self.layer_name}": mean file {path!r} holds '
                        f"{mean.size - int(finite.sum())} NaN or inf values of {mean.size}; "
                        "the layer's output will be NaN or inf there")
        return np.ascontiguousarray(mean, np.float32)

    @property
    def needs_rand(self):
        """Whether batches take random draws (Caffe's InitRand condition)."""
        return self.mirror or (self.phase == caffe_pb2.TRAIN and self.crop_size > 0)

    # --- Datums --------------------------------------------------------------------------
    def datum_to_array(self, datum):
        """The (C, H, W) pixels of a Datum: uint8 for ``data`` (decoded when ``encoded``),
        float32 for ``float_data``.

        Raises:
            CaffeError (naming neither layer nor record: callers know them): a Datum whose
            payload does not match its shape, or an image that does not decode.
        """
        if datum.encoded:
            color = True if self.param.force_color else False if self.param.force_gray else None
            return decode_image(datum.data, color, "the encoded image")
        if (self.param.force_color or self.param.force_gray) and not self._warned_force:
            LOG.error("force_color and force_gray only for encoded datum")
            self._warned_force = True
        shape = (datum.channels, datum.height, datum.width)
        if min(shape) <= 0:
            raise CaffeError(f"the Datum has shape {shape}; channels, height and width must "
                             "be positive")
        count = shape[0] * shape[1] * shape[2]
        if datum.data:
            if len(datum.data) != count:
                raise CaffeError(f"the Datum holds {len(datum.data)} bytes of data but its "
                                 f"shape {shape} needs {count}")
            return np.frombuffer(datum.data, np.uint8).reshape(shape)
        if len(datum.float_data) != count:
            raise CaffeError(f"the Datum holds {len(datum.float_data)} float_data values but "
                             f"its shape {shape} needs {count}")
        return np.asarray(datum.float_data, np.float32).reshape(shape)

    def infer_shape(self, datum, what="the first Datum"):
        """Caffe's InferBlobShape: (1, C, H, W) of one transformed Datum."""
        try:
            pixels = self.datum_to_array(datum)
        except CaffeError as error:
            raise self._error(f"{what}: {error}") from None
        return (1,) + self.output_shape(pixels.shape)

    def output_shape(self, item_shape):
        """(C, H, W) of a transformed image of shape ``item_shape``, after checking it."""
        channels, height, width = item_shape
        self._check_item(item_shape)
        if self.crop_size:
            return channels, self.crop_size, self.crop_size
        return channels, height, width

    def _check_item(self, item_shape):
        channels, height, width = item_shape
        if height < self.crop_size or width < self.crop_size:
            raise self._error(f"crop_size {self.crop_size} is larger than the image "
                              f"({height} x {width})")
        if self.mean_image is not None and self.mean_image.shape != tuple(item_shape):
            raise self._error(f"the mean file's shape {self.mean_image.shape} does not match "
                              f"the image's {tuple(item_shape)} (C, H, W)")
        if len(self.mean_values) not in (0, 1, channels):
            raise self._error(f"specify either 1 mean_value or as many as channels: "
                              f"{channels} (got {len(self.mean_values)})")

    # --- batches ---------------------------------------------------------------------------
    def draw(self, sizes, rng):
        """Per-image crop offsets and mirror flags for images of (height, width) ``sizes``.

        Returns:
            (h_off, w_off, mirror): int64, int64 and bool arrays of length N.
        """
        sizes = np.asarray(sizes, np.int64).reshape(-1, 2)
        count = sizes.shape[0]
        mirror = np.zeros(count, bool)
        if self.mirror:
            mirror = rng.integers(0, 2, size=count).astype(bool)
        if not self.crop_size:
            return np.zeros(count, np.int64), np.zeros(count, np.int64), mirror
        room = sizes - self.crop_size
        if self.phase == caffe_pb2.TRAIN:
            h_off = rng.integers(0, room[:, 0] + 1)
            w_off = rng.integers(0, room[:, 1] + 1)
        else:
            h_off, w_off = room[:, 0] // 2, room[:, 1] // 2
        return h_off.astype(np.int64), w_off.astype(np.int64), mirror

    def transform_batch(self, src, out, sizes=None, rng=None):
        """Transform a batch of images into ``out``.

        Args:
            src: (N, C, H, W) uint8 or float32 pixels. When ``sizes`` is given, image ``i``
                occupies ``src[i, :, :sizes[i, 0], :sizes[i, 1]]`` (a batch of images of
                different sizes, padded); otherwise every image is H x W.
            out: (N, C, crop or H, crop or W) float32 array to fill.
            sizes: optional (N, 2) int array of the images' heights and widths.
            rng: numpy Generator for the random draws (needed when ``needs_rand``).
        """
        count, channels, height, width = src.shape
        if sizes is None:
            sizes = np.tile(np.array([[height, width]], np.int64), (count, 1))
            self._check_item((channels, height, width))
        else:
            sizes = np.asarray(sizes, np.int64)
            for size in np.unique(sizes, axis=0):
                self._check_item((channels, int(size[0]), int(size[1])))
        expected = (count,) + self.output_shape((channels,) + tuple(int(s) for s in sizes[0]))
        if out.shape != expected or out.dtype != np.float32:
            raise ValueError(f"transform_batch: out must be float32 {expected}, got "
                             f"{out.dtype} {out.shape}")
        if not self.crop_size and np.any(sizes != sizes[0]):
            raise self._error("images in a batch differ in size; set crop_size (or resize the "
                              "images) so they can be batched")
        h_off, w_off, mirror = self.draw(sizes, rng)
        kind, mean = self._mean_operand(channels)
        _transform_runner()(src, h_off, w_off, mirror, mean, kind, self.scale, out)
        return out

    def _mean_operand(self, channels):
        """(kind, read-only float32 array) for the batch kernel (read-only in every case,
        so numba compiles it once)."""
        if self.mean_image is not None:
            return _MEAN_IMAGE, read_only(self.mean_image)
        if len(self.mean_values):
            values = np.broadcast_to(self.mean_values, (channels,))
            return _MEAN_VALUES, read_only(np.ascontiguousarray(values).reshape(channels, 1, 1))
        return _NO_MEAN, _NO_MEAN_OPERAND


def parse_datum(value):
    """Deserialise a database value as a caffe.Datum.

    Raises:
        CaffeError (naming neither layer nor record: callers know them): not a Datum.
    """
    datum = caffe_pb2.Datum()
    try:
        datum.ParseFromString(value)
    except (DecodeError, RuntimeError, ValueError) as error:
        raise CaffeError(f"not a valid Datum ({error})") from None
    return datum


def stage_images(images, buffer=None):
    """Copy (C, h_i, w_i) images into one (N, C, max h, max w) array for transform_batch.

    Returns:
        (src, sizes): the staged pixels (``buffer`` reused when its shape and dtype fit;
        float32 when any image is float) and the (N, 2) image sizes, or None when every
        image has the same size.

    Raises:
        CaffeError (without a layer name; callers add it): images differ in channels.
    """
    first = images[0]
    shape = (len(images),) + first.shape
    if buffer is None or buffer.shape != shape or buffer.dtype != first.dtype:
        buffer = np.empty(shape, first.dtype)
    try:
        np.stack(images, out=buffer, casting="no")  # the common case: one size, one type
        return buffer, None
    except (ValueError, TypeError):
        pass
    channels = first.shape[0]
    for image in images:
        if image.shape[0] != channels:
            raise CaffeError(f"images in a batch must have the same number of channels, got "
                             f"{channels} and {image.shape[0]}")
    sizes = np.array([image.shape[1:] for image in images], np.int64)
    dtype = np.float32 if any(image.dtype != np.uint8 for image in images) else np.uint8
    shape = (len(images), channels) + tuple(int(s) for s in sizes.max(axis=0))
    if buffer is None or buffer.shape != shape or buffer.dtype != dtype:
        buffer = np.empty(shape, dtype)
    for index, image in enumerate(images):
        buffer[index, :, :image.shape[1], :image.shape[2]] = image
    return buffer, sizes


@njit(cache=True, nogil=True, inline="always")
def _transform_image(src, i, top, left, flip, mean, mean_kind, scale, out):
    """Image ``i`` of the batch: the branches hoisted out of the row loops, so that each row
    is one loop LLVM vectorises (reading the source row backwards where it is mirrored); the
    same float32 operations, in the same order, as one value at a time."""
    channels, height, width = out.shape[1], out.shape[2], out.shape[3]
    for c in range(channels):
        for y in range(height):
            sy = top + y
            row, dst = src[i, c, sy], out[i, c, y]
            offset = mean[c, 0, 0] if mean_kind == 1 else np.float32(0)
            if mean_kind == 2:
                mean_row = mean[c, sy]
                if flip:
                    for x in range(width):
                        sx = left + width - 1 - x
                        dst[x] = (np.float32(row[sx]) - mean_row[sx]) * scale
                else:
                    for x in range(width):
                        dst[x] = (np.float32(row[left + x]) - mean_row[left + x]) * scale
            elif mean_kind == 1:
                if flip:
                    for x in range(width):
                        dst[x] = (np.float32(row[left + width - 1 - x]) - offset) * scale
                else:
                    for x in range(width):
                        dst[x] = (np.float32(row[left + x]) - offset) * scale
            elif flip:
                for x in range(width):
                    dst[x] = np.float32(row[left + width - 1 - x]) * scale
            else:
                for x in range(width):
                    dst[x] = np.float32(row[left + x]) * scale


@njit(cache=True, nogil=True)
def _transform_kernel(src, h_off, w_off, mirror, mean, mean_kind, scale, out):
    for i in range(out.shape[0]):
        _transform_image(src, i, h_off[i], w_off[i], mirror[i], mean, mean_kind, scale, out)


@njit(cache=True, nogil=True, parallel=True)
def _transform_kernel_parallel(src, h_off, w_off, mirror, mean, mean_kind, scale, out):
    for i in prange(out.shape[0]):
        _transform_image(src, i, h_off[i], w_off[i], mirror[i], mean, mean_kind, scale, out)


def _transform_runner():
    """The batch kernel for a prefetch thread: the parallel one on a thread pool that lets
    two threads launch work at once (TBB, OpenMP), the serial one on numba's workqueue pool,
    which must not be entered from the prefetch thread while the main thread computes."""
    from pycaffe_cli.threads import pool_name
    return _transform_kernel if pool_name() == "workqueue" else _transform_kernel_parallel
