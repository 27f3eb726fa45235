"""The two resizers BVLC's ``caffe.io.resize_image`` calls, in numpy, giving their numbers.

- ``skimage_resize`` is ``skimage.transform.resize(image, shape, order, mode='constant')`` as
  scikit-image >= 0.19 runs it on a float image: a Gaussian pre-filter on every axis that
  shrinks (sigma ``(factor - 1) / 2``, scipy's ``gaussian_filter`` with ``truncate=4.0`` and
  zero padding), then ``scipy.ndimage.zoom(..., grid_mode=True, mode='grid-constant')``,
  then the output clipped to the input's range.
- ``ndimage_zoom`` is ``scipy.ndimage.zoom(image, factors, order)`` with its defaults
  (``mode='constant'``, ``grid_mode=False``).

Both resize the first two axes and leave the others (channels) alone. The arithmetic follows
scipy's C code step for step (double precision inside, each pass stored in the image's dtype,
taps summed in the same order), so float32 results agree with scipy's bit for bit or within
an ulp. Interpolation orders 0 (nearest) and 1 (linear) are built in; orders 2 to 5 need
B-spline prefiltering and are handed to scipy when it is installed.
"""
import math
import numbers

import numpy as np

_TRUNCATE = 4.0  # scipy.ndimage.gaussian_filter's default, in standard deviations
_BUILT_IN_ORDERS = (0, 1)


def gaussian_kernel(sigma):
    """scipy's normalised 1-D Gaussian for ``sigma``: radius ``int(4 sigma + 0.5)``."""
    radius = int(_TRUNCATE * float(sigma) + 0.5)
    offsets = np.arange(-radius, radius + 1)
    weights = np.exp(-0.5 / (sigma * sigma) * offsets ** 2)
    return weights / weights.sum()


def gaussian_filter_1d(image, sigma, axis):
    """scipy.ndimage.gaussian_filter1d with zero padding, result in ``image``'s dtype.

    scipy's correlation of a symmetric kernel starts from the centre tap and adds the pairs
    of taps from the outermost inwards, ``(x[i - j] + x[i + j]) * w[j]``; we keep that order.
    """
    weights = gaussian_kernel(sigma)
    radius = weights.size // 2
    lines = np.moveaxis(np.asarray(image, dtype=np.float64), axis, 0)
    length = lines.shape[0]
    padded = np.zeros((length + 2 * radius,) + lines.shape[1:])
    padded[radius:radius + length] = lines
    total = padded[radius:radius + length] * weights[radius]
    pair = np.empty_like(total)
    for offset in range(radius, 0, -1):
        left = padded[radius - offset:radius - offset + length]
        right = padded[radius + offset:radius + offset + length]
        np.add(left, right, out=pair)
        pair *= weights[radius - offset]
        total += pair
    return np.moveaxis(total, 0, axis).astype(image.dtype)


def gaussian_filter(image, sigmas):
    """scipy.ndimage.gaussian_filter (zero padding): one pass per axis whose sigma > 1e-15,
    each pass stored in the image's dtype before the next reads it."""
    filtered = image
    for axis, sigma in enumerate(sigmas):
        if sigma > 1e-15:
            filtered = gaussian_filter_1d(filtered, sigma, axis)
    return filtered


def _mirror_index(index, length):
    """scipy's whole-sample mirror of integer positions into [0, length)."""
    if length <= 1:
        return np.zeros_like(index)
    period = 2 * length - 2
    index = np.abs(index) % period
    return np.where(index >= length, period - index, index)


def _axis_taps(in_size, out_size, order, grid_mode):
    """Where each output sample along one axis reads its input (scipy's NI_ZoomShift).

    Returns:
        (taps, outside): ``taps`` is a list of ``order + 1`` pairs (input index, weight or
        None for order 0), with index -1 for a tap that reads the constant (grid modes);
        ``outside`` marks outputs that lie beyond the input and take the constant whole
        (``mode='constant'`` without grid mode).
    """
    if grid_mode:
        zoom = in_size / out_size
        coords = (np.arange(out_size) + 0.5) * zoom - 0.5
    else:
        zoom = (in_size - 1) / (out_size - 1) if out_size > 1 else 1.0
        coords = np.arange(out_size) * zoom
    outside = np.zeros(out_size, bool) if grid_mode else (coords < 0) | (coords > in_size - 1)
    if order == 0:
        starts = np.floor(coords + 0.5).astype(np.int64)
        return [(_tap_index(starts, in_size, grid_mode), None)], outside
    starts = np.floor(coords).astype(np.int64)
    first = 1.0 - (coords - np.floor(coords))
    second = 1.0 - first  # scipy makes the weights sum to one this way
    return [(_tap_index(starts, in_size, grid_mode), first),
            (_tap_index(starts + 1, in_size, grid_mode), second)], outside


def _tap_index(index, length, grid_mode):
    if grid_mode:
        return np.where((index < 0) | (index >= length), -1, index)
    return _mirror_index(index, length)


def _gather(image, index, axis):
    """``image`` taken at ``index`` along ``axis``, zero where the index is -1."""
    values = np.take(image, np.maximum(index, 0), axis=axis)
    if (index < 0).any():
        shape = [1] * image.ndim
        shape[axis] = index.size
        values = np.where((index < 0).reshape(shape), 0.0, values)
    return values


def _weighted(values, weight, axis):
    if weight is None:
        return values
    shape = [1] * values.ndim
    shape[axis] = weight.size
    return values * weight.reshape(shape)


def interpolate(image, out_rows, out_cols, order, grid_mode):
    """Zoom the first two axes of ``image`` to (out_rows, out_cols), order 0 or 1, constant 0
    outside; the sum runs over taps row-major and each term is ``(x * w_row) * w_col``, as
    scipy's does. Returns float64."""
    source = np.asarray(image, dtype=np.float64)
    row_taps, row_out = _axis_taps(source.shape[0], out_rows, order, grid_mode)
    col_taps, col_out = _axis_taps(source.shape[1], out_cols, order, grid_mode)
    total = None
    for row_index, row_weight in row_taps:
        rows = _weighted(_gather(source, row_index, 0), row_weight, 0)
        for col_index, col_weight in col_taps:
            term = _weighted(_gather(rows, col_index, 1), col_weight, 1)
            total = term if total is None else total + term
    total[row_out] = 0.0
    total[:, col_out] = 0.0
    return total


def _store(values, dtype):
    """scipy's cast of interpolated doubles to the output dtype (integers rounded)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "u":
        limit = np.iinfo(dtype).max
        return np.floor(np.clip(values + 0.5, 0, limit)).astype(dtype)
    if dtype.kind == "i":
        info = np.iinfo(dtype)
        rounded = np.trunc(np.where(values > 0, values + 0.5, values - 0.5))
        return np.clip(rounded, info.min, info.max).astype(dtype)
    return values.astype(dtype)


def check_dims(value, name):
    """``value`` as (height, width): two integers > 0 (floats with an integral value, such as
    computed sizes, too).

    Raises:
        ValueError: naming ``name`` and the value (a size of 0 or less, 1.5, one entry or
            three, a string).
    """
    try:
        dims = tuple(value)
    except TypeError:
        dims = ()
    if len(dims) != 2 or not all(_positive_integer(size) for size in dims):
        raise ValueError(f"{name} must be (height, width), two integers > 0, got {value!r}")
    return tuple(int(size) for size in dims)


def _positive_integer(value):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return False
    if isinstance(value, numbers.Integral):
        return value > 0
    return math.isfinite(value) and float(value).is_integer() and value > 0


def check_image(image, name):
    """An image to resize or crop has a height and a width of at least one pixel (and
    channels, when it has a third axis); ValueError naming ``name`` and the shape."""
    if image.ndim < 2 or image.size == 0:
        raise ValueError(f"{name} must be an (H, W, K) image of at least 1x1 pixels, got an "
                         f"array of shape {image.shape}")


def _check_order(order):
    if not isinstance(order, (int, np.integer)) or not 0 <= order <= 5:
        raise ValueError(f"interp_order must be an integer from 0 to 5, got {order!r}")


def _scipy_ndimage(order):
    try:
        from scipy import ndimage
    except ImportError:
        raise NotImplementedError(
            f"interp_order={order} needs scipy (pip install scipy): pycaffe resizes with "
            "orders 0 (nearest) and 1 (linear) itself") from None
    return ndimage


def zoomed_shape(shape, factors):
    """scipy.ndimage.zoom's output shape: ``round(size * factor)`` per axis."""
    return tuple(int(round(size * factor)) for size, factor in zip(shape, factors))


def ndimage_zoom(image, factors, order):
    """scipy.ndimage.zoom(image, factors, order) with scipy's defaults; ``factors`` has one
    entry per axis and must be 1 past the first two axes."""
    _check_order(order)
    shape = zoomed_shape(image.shape, factors)
    if shape[2:] != image.shape[2:]:
        raise ValueError(f"cannot zoom axes past the first two: {image.shape} -> {shape}")
    if order not in _BUILT_IN_ORDERS:
        return _scipy_ndimage(order).zoom(image, factors, order=order)
    values = interpolate(image, shape[0], shape[1], order, grid_mode=False)
    return _store(values, image.dtype)


def skimage_resize(image, output_shape, order):
    """skimage.transform.resize(image, output_shape, order=order, mode='constant') of a
    float image whose first two axes are resized (``output_shape`` = (rows, cols))."""
    _check_order(order)
    image = np.asarray(image)
    if image.dtype == np.float16:
        image = image.astype(np.float32)
    out_rows, out_cols = (int(size) for size in output_shape)
    full_shape = (out_rows, out_cols) + image.shape[2:]
    factors = np.divide(image.shape, full_shape)
    filtered = image
    if any(out < size for out, size in zip(full_shape, image.shape)):
        filtered = gaussian_filter(image, np.maximum(0, (factors - 1) / 2))
    shape = zoomed_shape(image.shape, [1 / factor for factor in factors])
    if order in _BUILT_IN_ORDERS:
        values = interpolate(filtered, shape[0], shape[1], order, grid_mode=True)
        resized = values.astype(image.dtype)
    else:
        resized = _scipy_ndimage(order).zoom(
            filtered, [1 / factor for factor in factors], order=order,
            mode="grid-constant", cval=0.0, grid_mode=True)
    return _clip_to_input_range(image, resized)


def _clip_to_input_range(image, resized):
    """skimage's clip of the output to the input's [min, max] (NaN-aware); zeros that the
    constant border brought in stay when 0 lies outside that range."""
    low, high = np.min(image), np.max(image)
    if math.isnan(low):
        low, high = np.nanmin(image), np.nanmax(image)
        keep_zeros = not low <= 0 <= high and np.nanmin(resized) <= 0 <= np.nanmax(resized)
    else:
        keep_zeros = not low <= 0 <= high and np.min(resized) <= 0 <= np.max(resized)
    zeros = resized == 0 if keep_zeros else None
    np.clip(resized, low, high, out=resized)
    if zeros is not None:
        resized[zeros] = 0
    return resized
