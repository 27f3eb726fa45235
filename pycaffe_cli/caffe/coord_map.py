"""Relate the coordinates of blobs in a net spec (``caffe.coord_map``, BVLC's module).

A coordinate map is a triple ``(axis, a, b)``: along the spatial axes after ``axis`` (a
convolution's ``axis``, 1 for N, C, H, W blobs), the point ``x`` of a layer's input lies at
``a * x + b`` in its output. ``a`` and ``b`` are
scalars or per-axis numpy arrays; ``axis`` is None for layers that do not move coordinates
(ReLU, Eltwise, ...), which compose with any axis. Walking a net spec back from two tops to a
common ancestor gives the map between them, which is what a Crop layer needs to line up a
score map with the input (FCN-style nets): :func:`crop` builds that layer.

Failed checks raise ``AssertionError`` (as BVLC's ``assert`` statements do), also under
``python -O``.
"""
import numpy as np

from .net_spec import layers as L

PASS_THROUGH_LAYERS = ['AbsVal', 'BatchNorm', 'Bias', 'BNLL', 'Dropout',
                       'Eltwise', 'ELU', 'Log', 'LRN', 'Exp', 'MVN', 'Power',
                       'ReLU', 'PReLU', 'Scale', 'Sigmoid', 'Split', 'TanH',
                       'Threshold']

_LEGACY_2D_FIELDS = {'pad_h', 'pad_w', 'kernel_h', 'kernel_w', 'stride_h', 'stride_w'}
_IDENTITY = (None, 1, 0)


class UndefinedMapException(Exception):
    """The layer type has no coordinate map (e.g. InnerProduct)."""


class AxisMismatchException(Exception):
    """Two maps over different axes cannot be composed."""


def _require(condition, message):
    if not condition:
        raise AssertionError(message)


def conv_params(fn):
    """Spatial parameters of a Convolution, Deconvolution, Im2col or Pooling Function.

    They come from ``convolution_param=dict(...)`` when given, else from the layer's keywords
    (Pooling's ``kernel_size``/``stride``/``pad`` are keywords of its pooling_param).

    Args:
        fn: a net_spec Function.

    Returns:
        tuple: ``(axis, stride, effective kernel extent (k - 1) * dilation + 1, pad)``, the
        last three as 1-d numpy arrays (one entry, or one per spatial axis).

    Raises:
        AssertionError: the legacy ``_h``/``_w`` keywords are used.
        KeyError: no ``kernel_size``.
    """
    params = fn.params.get('convolution_param', fn.params)
    axis = params.get('axis', 1)
    _require(not _LEGACY_2D_FIELDS & set(fn.params),
             'cropping does not support legacy _h/_w params')
    if 'kernel_size' not in params:
        raise KeyError(f'{fn.type_name} layer has no kernel_size to map coordinates with')
    kernel = np.array(params['kernel_size'], ndmin=1)
    dilation = np.array(params.get('dilation', 1), ndmin=1)
    stride = np.array(params.get('stride', 1), ndmin=1)
    pad = np.array(params.get('pad', 0), ndmin=1)
    return axis, stride, (kernel - 1) * dilation + 1, pad


def crop_params(fn):
    """``(axis, offset)`` of a Crop Function: axis defaults to 2 (the spatial axes of N, C,
    H, W) and offset to 0; offset is a 1-d numpy array."""
    params = fn.params.get('crop_param', fn.params)
    axis = params.get('axis', 2)
    offset = np.array(params.get('offset', 0), ndmin=1)
    return axis, offset


def coord_map(fn):
    """The coordinate map ``(axis, scale, shift)`` of one layer, from its bottom to its top.

    Convolution, Pooling and Im2col: ``(axis, 1 / s, (p - (k - 1) / 2) / s)`` for stride s,
    pad p and effective kernel k; Deconvolution, the inverse: ``(axis, s, (k - 1) / 2 - p)``;
    Crop: ``(axis - 1, 1, -offset)``; pass-through layers: ``(None, 1, 0)``.

    Raises:
        UndefinedMapException: for any other layer type.
    """
    if fn.type_name in ['Convolution', 'Pooling', 'Im2col']:
        axis, stride, kernel, pad = conv_params(fn)
        return axis, 1 / stride, (pad - (kernel - 1) / 2) / stride
    if fn.type_name == 'Deconvolution':
        axis, stride, kernel, pad = conv_params(fn)
        return axis, stride, (kernel - 1) / 2 - pad
    if fn.type_name in PASS_THROUGH_LAYERS:
        return _IDENTITY
    if fn.type_name == 'Crop':
        axis, offset = crop_params(fn)
        # Crop's axis is the first cropped one; a map's axis is the one before its first.
        return axis - 1, 1, -offset
    raise UndefinedMapException(f'no coordinate map for {fn.type_name} layers')


def compose(base_map, next_map):
    """Apply ``base_map`` then ``next_map``: ``(axis, a1 * a2, a1 * b2 + b1)``.

    Raises:
        AxisMismatchException: both maps name an axis and the axes differ.
    """
    ax1, a1, b1 = base_map
    ax2, a2, b2 = next_map
    if ax1 is None:
        ax = ax2
    elif ax2 is None or ax1 == ax2:
        ax = ax1
    else:
        raise AxisMismatchException(f'cannot compose maps over axis {ax1} and axis {ax2}')
    return ax, a1 * a2, a1 * b2 + b1


def inverse(coord_map):
    """The map back: ``(axis, 1 / a, -b / a)``."""
    ax, a, b = coord_map
    return ax, 1 / a, -b / a


def _mappable_bottoms(top):
    """The bottoms whose coordinates a layer maps: all of them, except that a Crop layer's
    second bottom only gives the output size."""
    bottoms = top.fn.inputs
    if top.fn.type_name == 'Crop':
        bottoms = bottoms[:1]
    return bottoms


def _maps_to_ancestors(start):
    """The map from every spatially connected ancestor of ``start`` to ``start``."""
    maps = {start: _IDENTITY}
    frontier = {start}
    while frontier:
        _step_back(frontier.pop(), maps, frontier)
    return maps


def _step_back(top, maps, frontier):
    """Map ``top``'s mappable bottoms through its layer (when that has a map): add them to
    ``maps`` and to the ``frontier`` still to walk."""
    try:
        layer_map = coord_map(top.fn)
    except UndefinedMapException:
        return
    for bottom in _mappable_bottoms(top):
        maps[bottom] = compose(maps[top], layer_map)
        frontier.add(bottom)


def coord_map_from_to(top_from, top_to):
    """The coordinate map from ``top_from`` to ``top_to`` through a common ancestor.

    Composes the layer maps from ``top_from`` back to each of its ancestors, walks back from
    ``top_to`` until it reaches one of them, and returns the ``top_to`` side composed with
    the inverse of the ``top_from`` side.

    Args:
        top_from: a net_spec Top (e.g. the output to be cropped).
        top_to: a net_spec Top (e.g. the blob whose frame the crop should match).

    Returns:
        tuple: ``(axis, a, b)``.

    Raises:
        RuntimeError: the two tops share no ancestor reachable through spatial layers.
    """
    from_maps = _maps_to_ancestors(top_from)
    to_maps = {top_to: _IDENTITY}
    frontier = {top_to}
    while frontier:
        top = frontier.pop()
        if top in from_maps:
            return compose(to_maps[top], inverse(from_maps[top]))
        _step_back(top, to_maps, frontier)
    raise RuntimeError('Could not compute map between tops; are they '
                       'connected by spatial layers?')


def crop(top_from, top_to):
    """A Crop layer that cuts ``top_from`` down to the frame of ``top_to``.

    Returns:
        Top: ``layers.Crop(top_from, top_to, crop_param=dict(axis=..., offset=[...]))``, the
        axis being the first cropped one (the map's axis + 1).

    Raises:
        AssertionError: the two tops differ in scale, ``top_from`` would need a negative or a
            fractional crop.
    """
    ax, a, b = coord_map_from_to(top_from, top_to)
    _require(np.all(a == 1), 'scale mismatch on crop (a = {})'.format(a))
    _require(np.all(b <= 0), 'cannot crop negative offset (b = {})'.format(b))
    _require(np.all(np.round(b) == b), 'cannot crop noninteger offset (b = {})'.format(b))
    offsets = [int(offset) for offset in np.atleast_1d(-np.round(b))]
    return L.Crop(top_from, top_to, crop_param=dict(axis=ax + 1, offset=offsets))
