"""``caffe.io``: BVLC's array/protobuf conversions, input preprocessing and image helpers.

The numbers are BVLC's (python/caffe/io.py) with numpy and Pillow in place of scikit-image
and scipy: ``load_image`` gives what ``skimage.io.imread`` + ``img_as_float`` give, and
``resize_image`` what ``skimage.transform.resize`` / ``scipy.ndimage.zoom`` give (see
``caffe._resize``).
"""
import numpy as np

from caffe._image_file import load_image
from caffe._arguments import check_input_shape, check_order, check_scale
from caffe._resize import check_dims, check_image, ndimage_zoom, skimage_resize
from pycaffe_cli.data.image import decode_image
from pycaffe_cli.io.blob_proto import blob_proto_shape, blob_proto_to_array, fill_blob_proto
from pycaffe_cli.proto import caffe_pb2

__all__ = ["blobproto_to_array", "array_to_blobproto", "arraylist_to_blobprotovector_str",
           "blobprotovector_str_to_arraylist", "array_to_datum", "datum_to_array",
           "Transformer", "load_image", "resize_image", "oversample", "caffe_pb2"]


# --- proto / datum / ndarray conversion ---------------------------------------------------
def blobproto_to_array(blob, return_diff=False):
    """The data (or diff) of a BlobProto as a float32 array in the blob's shape.

    The shape is the legacy ``(num, channels, height, width)`` when any of those four fields
    is set (unset ones count as 0), else ``shape.dim``; a blob with neither holds a scalar.
    float32 is what BVLC's ``np.array(blob.data)`` gives with today's protobuf (upb); the
    ``double_data`` / ``double_diff`` fields are ignored, as BVLC ignores them.

    Args:
        blob: a ``caffe_pb2.BlobProto``.
        return_diff: return the diff instead of the data.

    Raises:
        ValueError: the number of values does not fit the shape.
    """
    field = "diff" if return_diff else "data"
    shape = blob_proto_shape(blob)
    count = int(np.prod(shape, dtype=np.int64))
    stored = len(getattr(blob, field))
    if stored != count:
        raise ValueError(f"cannot reshape the BlobProto's {stored} {field} values to its shape "
                         f"{shape} ({count} values)")
    if len(blob.double_data) or len(blob.double_diff):
        return np.array(getattr(blob, field), dtype=np.float32).reshape(shape)
    return blob_proto_to_array(blob, diff=return_diff)


def array_to_blobproto(arr, diff=None):
    """A BlobProto holding ``arr`` (any number of axes; the shape goes to ``shape.dim``) as
    float32 data, and ``diff`` (same size) as its diff when given.

    Raises:
        ValueError: ``diff`` has a different number of values.
    """
    blob = fill_blob_proto(caffe_pb2.BlobProto(), np.asarray(arr, dtype=np.float64),
                           None if diff is None else np.asarray(diff, dtype=np.float64))
    blob.shape.SetInParent()  # BVLC always writes the shape, empty for a 0-axis array
    return blob


def arraylist_to_blobprotovector_str(arraylist):
    """A serialized BlobProtoVector of the arrays in ``arraylist`` (bytes)."""
    vector = caffe_pb2.BlobProtoVector()
    vector.blobs.extend(array_to_blobproto(arr) for arr in arraylist)
    return vector.SerializeToString()


def blobprotovector_str_to_arraylist(str):  # noqa: A002 (BVLC's parameter name)
    """The data arrays of a serialized BlobProtoVector, one per blob (see blobproto_to_array).
    """
    vector = caffe_pb2.BlobProtoVector()
    vector.ParseFromString(str)
    return [blobproto_to_array(blob) for blob in vector.blobs]


def array_to_datum(arr, label=None):
    """A Datum of a (channels, height, width) array.

    uint8 arrays are stored as the ``data`` bytes, anything else as float32 ``float_data``.

    Args:
        arr: the 3-axis array.
        label: the integer label; left unset (not serialized) when None.

    Raises:
        ValueError: ``arr`` does not have 3 axes.
    """
    arr = np.asarray(arr)
    if arr.ndim != 3:
        raise ValueError(f"array_to_datum needs a (channels, height, width) array, got shape "
                         f"{arr.shape}")
    datum = caffe_pb2.Datum()
    datum.channels, datum.height, datum.width = arr.shape
    if arr.dtype == np.uint8:
        datum.data = arr.tobytes()
    else:
        datum.float_data.extend(arr.astype(np.float64).ravel().tolist())
    if label is not None:
        datum.label = label
    return datum


def datum_to_array(datum):
    """The pixels of a Datum as a (channels, height, width) array (the label is not returned).

    Raw ``data`` bytes come back as uint8, ``float_data`` as float64. An encoded Datum (image
    file bytes) is decoded as Caffe's DecodeDatumNative does: uint8, colour in BGR order.

    Raises:
        ValueError: the stored values do not fit channels x height x width.
    """
    if datum.encoded and len(datum.data):
        return decode_image(datum.data, color=None, what="encoded Datum")
    shape = (datum.channels, datum.height, datum.width)
    if len(datum.data):
        values = np.frombuffer(datum.data, dtype=np.uint8).copy()
    else:
        values = np.array(datum.float_data, dtype=np.float64)
    if values.size != int(np.prod(shape)):
        raise ValueError(f"Datum of shape {shape} holds {values.size} values")
    return values.reshape(shape)


# --- image helpers ------------------------------------------------------------------------
def resize_image(im, new_dims, interp_order=1):
    """Resize an (H, W, K) image to ``new_dims`` = (height, width), keeping K.

    As BVLC: with 1 or 3 channels the image is scaled to [0, 1] by its own min and max,
    resized by scikit-image's ``resize`` (``mode='constant'``, Gaussian anti-aliasing when
    shrinking) and scaled back; a constant image comes back filled with its value; other
    channel counts go through ``scipy.ndimage.zoom``. Orders 0 (nearest) and 1 (linear) are
    built in; orders 2-5 need scipy installed.

    Args:
        im: (H, W, K) array.
        new_dims: (height, width) of the result.
        interp_order: spline interpolation order (0-5), linear by default.

    Returns:
        (height, width, K) float32 array.

    Raises:
        ValueError: ``new_dims`` is not two integers > 0, or ``im`` has no pixels.
    """
    im = np.asarray(im)
    new_dims = check_dims(new_dims, "new_dims")
    check_image(im, "im")
    if im.shape[-1] not in (1, 3):
        factors = tuple(np.array(new_dims, dtype=float) / np.array(im.shape[:2]))
        return ndimage_zoom(im, factors + (1,) * (im.ndim - 2), interp_order).astype(np.float32)
    im_min, im_max = im.min(), im.max()
    if not im_max > im_min:
        filled = np.empty(new_dims + (im.shape[-1],), dtype=np.float32)
        filled.fill(im_min)
        return filled
    im_std = (im - im_min) / (im_max - im_min)
    resized_std = skimage_resize(im_std, new_dims, interp_order)
    return (resized_std * (im_max - im_min) + im_min).astype(np.float32)


def oversample(images, crop_dims):
    """Ten crops of each image: the four corners and the centre, then the same five mirrored
    left-right.

    Args:
        images: sequence of (H, W, K) arrays, all of the first one's shape.
        crop_dims: (height, width) of the crops.

    Returns:
        (10 * len(images), height, width, K) float32 array, image by image.

    Raises:
        ValueError: no images, images of different shapes or not (H, W, K), ``crop_dims``
            not two integers > 0, or a crop larger than the images.
    """
    if len(images) == 0:
        raise ValueError("oversample needs at least one image, got none")
    im_shape = np.asarray(images[0]).shape
    if len(im_shape) != 3:
        raise ValueError(f"oversample needs (H, W, K) images, got image 0 of shape {im_shape}")
    crop_h, crop_w = check_dims(crop_dims, "crop_dims")
    if crop_h > im_shape[0] or crop_w > im_shape[1]:
        raise ValueError(f"crop of {crop_h}x{crop_w} is larger than the {im_shape[0]}x"
                         f"{im_shape[1]} images")
    corners = [(top, left) for top in (0, im_shape[0] - crop_h)
               for left in (0, im_shape[1] - crop_w)]
    # BVLC places the centre crop at int(centre - crop / 2), computed in floats.
    centre = (int(im_shape[0] / 2.0 - crop_h / 2.0), int(im_shape[1] / 2.0 - crop_w / 2.0))
    origins = corners + [centre]
    crops = np.empty((10 * len(images), crop_h, crop_w, im_shape[-1]), dtype=np.float32)
    for number, image in enumerate(images):
        image = np.asarray(image)
        if image.shape != im_shape:
            raise ValueError(f"oversample needs images of one shape: image {number} is "
                             f"{image.shape}, image 0 {im_shape}")
        first = 10 * number
        for offset, (top, left) in enumerate(origins):
            crops[first + offset] = image[top:top + crop_h, left:left + crop_w, :]
        crops[first + 5:first + 10] = crops[first:first + 5, :, ::-1, :]
    return crops


# --- pre-processing -----------------------------------------------------------------------
class Transformer:
    """Turns (H', W', K) images into a net input's (K, H, W) layout, and back.

    ``preprocess`` converts to float32, resizes to the input's (H, W) when they differ, then
    applies whichever of transpose, channel swap, raw scale, mean subtraction and input
    scale were set for that input, in that order; ``deprocess`` undoes them in reverse.

    Args:
        inputs: {input blob name: its shape (N, K, H, W)}, e.g.
            ``{'data': net.blobs['data'].data.shape}``.

    Raises:
        TypeError: ``inputs`` is not a dict; ValueError: a shape holds something other than
            integers >= 0.
    """

    def __init__(self, inputs):
        if not hasattr(inputs, "items"):
            raise TypeError(f"inputs must be a dict {{input name: shape}}, got "
                            f"{type(inputs).__name__}")
        for in_, shape in inputs.items():
            check_input_shape(in_, shape)
        self.inputs = inputs
        self.transpose = {}
        self.channel_swap = {}
        self.raw_scale = {}
        self.mean = {}
        self.input_scale = {}

    def __check_input(self, in_):
        if in_ not in self.inputs:
            raise ValueError(f"{in_!r} is not one of the net inputs: {list(self.inputs)}")

    def preprocess(self, in_, data):
        """Format an (H', W', K) image for input ``in_``; returns a (K, H, W) float32 array.

        The caller's array is never modified.

        Raises:
            ValueError: ``data`` is not an (H', W', K) image, or the input is not (N, K, H, W)
                with H, W > 0; and the errors of the settings (named with the input).
        """
        self.__check_input(in_)
        caffe_in = np.array(data, dtype=np.float32)
        in_dims = self._image_dims(in_)
        if caffe_in.ndim != 3 or 0 in caffe_in.shape[:2]:
            raise ValueError(f"preprocessing input {in_!r}: data must be an (H, W, K) image of "
                             f"at least 1x1 pixels, got an array of shape {caffe_in.shape}")
        if caffe_in.shape[:2] != in_dims:
            caffe_in = resize_image(caffe_in, in_dims)
        try:
            return self._apply(in_, caffe_in)
        except ValueError as error:
            raise ValueError(f"preprocessing input {in_!r}: {error}") from error

    def _image_dims(self, in_):
        shape = tuple(self.inputs[in_])
        if len(shape) != 4 or 0 in shape[2:]:
            raise ValueError(f"preprocessing input {in_!r}: its shape {shape} is not (N, K, H, "
                             "W) with H, W > 0")
        return shape[2:]

    def _apply(self, in_, caffe_in):
        transpose = self.transpose.get(in_)
        if transpose is not None:
            caffe_in = caffe_in.transpose(transpose)
        channel_swap = self.channel_swap.get(in_)
        if channel_swap is not None:
            caffe_in = caffe_in[channel_swap, :, :]
        if self.raw_scale.get(in_) is not None:
            caffe_in *= self.raw_scale[in_]
        if self.mean.get(in_) is not None:
            caffe_in -= self.mean[in_]
        if self.input_scale.get(in_) is not None:
            caffe_in *= self.input_scale[in_]
        return caffe_in

    def deprocess(self, in_, data):
        """Undo ``preprocess`` on a net array for input ``in_`` (squeezed of unit axes)."""
        self.__check_input(in_)
        decaf_in = np.array(data, copy=True).squeeze()
        if self.input_scale.get(in_) is not None:
            decaf_in /= self.input_scale[in_]
        if self.mean.get(in_) is not None:
            decaf_in += self.mean[in_]
        if self.raw_scale.get(in_) is not None:
            decaf_in /= self.raw_scale[in_]
        if self.channel_swap.get(in_) is not None:
            decaf_in = decaf_in[np.argsort(self.channel_swap[in_]), :, :]
        if self.transpose.get(in_) is not None:
            decaf_in = decaf_in.transpose(np.argsort(self.transpose[in_]))
        return decaf_in

    def set_transpose(self, in_, order):
        """Axis order taking the image to the input's layout, e.g. (2, 0, 1) for HWK -> KHW.

        Raises:
            ValueError: ``order`` is not a permutation of the image's axes.
        """
        self.__check_input(in_)
        axes = len(self.inputs[in_]) - 1
        check_order(order, range(axes), f"transpose order {tuple(order)} for input {in_!r}",
                    permutation=True)
        self.transpose[in_] = order

    def set_channel_swap(self, in_, order):
        """Channel order, applied after the transpose (channels first), e.g. (2, 1, 0) for
        RGB -> BGR.

        Raises:
            ValueError: ``order`` does not have one entry, a channel index, per input channel.
        """
        self.__check_input(in_)
        check_order(order, range(self.inputs[in_][1]),
                    f"channel swap {tuple(order)} for input {in_!r}")
        self.channel_swap[in_] = order

    def set_raw_scale(self, in_, scale):
        """Scale applied before the mean: 255 for models trained on [0, 255] pixels fed
        images from ``load_image`` (which are in [0, 1]).

        Raises:
            TypeError: ``scale`` is not a number; ValueError: it is NaN or infinite.
        """
        self.__check_input(in_)
        self.raw_scale[in_] = check_scale(scale, f"raw scale for input {in_!r}")

    def set_mean(self, in_, mean):
        """Mean to subtract: (K,) per channel, or (K, H, W) / (H, W) per pixel.

        A per-pixel mean of another height and width is resized to the input's with
        ``resize_image`` (after scaling it to [0, 1] by its own min and max).

        Raises:
            ValueError: the mean's shape does not fit the input.
        """
        self.__check_input(in_)
        mean = np.asarray(mean)
        in_shape = tuple(self.inputs[in_][1:])
        if mean.ndim == 1:
            if mean.shape[0] != in_shape[0]:
                raise ValueError(f"mean of {mean.shape[0]} channels for input {in_!r} of "
                                 f"{in_shape[0]} channels")
            mean = mean[:, np.newaxis, np.newaxis]
        elif mean.ndim not in (2, 3):
            raise ValueError(f"mean of shape {mean.shape} for input {in_!r}: it must be (K,), "
                             "(K, H, W) or (H, W)")
        elif ((1,) + mean.shape if mean.ndim == 2 else mean.shape) != in_shape:
            mean = _resized_mean(mean if mean.ndim == 3 else mean[np.newaxis], in_shape, in_)
        self.mean[in_] = mean

    def set_input_scale(self, in_, scale):
        """Scale applied last, after the mean subtraction (errors: as set_raw_scale)."""
        self.__check_input(in_)
        self.input_scale[in_] = check_scale(scale, f"input scale for input {in_!r}")


def _resized_mean(mean, in_shape, in_):
    """A (K, H', W') mean resized to the input's (H, W), through [0, 1] as BVLC does."""
    if mean.shape[0] not in (1, in_shape[0]):
        raise ValueError(f"mean of shape {mean.shape} for input {in_!r} of shape {in_shape}: "
                         "the channels differ")
    m_min, m_max = mean.min(), mean.max()
    if not m_max > m_min:
        return np.full((mean.shape[0],) + in_shape[1:], m_min, dtype=mean.dtype)
    normal_mean = (mean - m_min) / (m_max - m_min)
    resized = resize_image(normal_mean.transpose((1, 2, 0)), in_shape[1:])
    return resized.transpose((2, 0, 1)) * (m_max - m_min) + m_min
