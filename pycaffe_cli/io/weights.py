"""Caffe's weight files, independent of the Net class.

Two formats, as in Caffe's Net::CopyTrainedLayersFrom / Net::ToProto / Net::ToHDF5:

* ``.caffemodel``: a binary NetParameter whose layers carry their learnable blobs
  (BlobProto: ``shape`` or legacy num/channels/height/width, ``data`` or ``double_data``).
  Old files (V0/V1 layers) are upgraded first, as Caffe does.
* ``.h5`` / ``.caffemodel.h5``: HDF5 with a group ``data`` holding one group per layer, whose
  datasets ``"0"``, ``"1"``, ... are the layer's params (float32). Params shared from another
  layer are not stored; ``diff`` mirrors ``data`` for the gradients when asked for.
"""
import h5py
import numpy as np

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.blob_proto import blob_proto_to_array, fill_blob_proto
from pycaffe_cli.io.hdf5_image import write_hdf5_atomically
from pycaffe_cli.io.hdf5_read import H5PY_ERRORS, h5py_detail, read_float32
from pycaffe_cli.io.input_files import check_input_file, file_problem
from pycaffe_cli.io.prototxt import read_net_param_binary
from pycaffe_cli.io.upgrade import upgrade_net
from pycaffe_cli.log import LOG

__all__ = ["fill_blob_proto", "blob_proto_to_array", "read_weights", "is_hdf5_weights",
           "write_hdf5_weights"]

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_MAX_PARAM_DIGITS = 4   # a layer has a handful of params; "123456789" would be damage


def is_hdf5_weights(path):
    """Caffe's rule: a name ending in ``.h5`` is HDF5. We also recognise HDF5 files by their
    signature, so a renamed HDF5 snapshot still loads."""
    if str(path).endswith(".h5"):
        return True
    if file_problem(path) is not None:   # never open a pipe or a device to look inside
        return False
    try:
        with open(path, "rb") as stream:
            return stream.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE
    except OSError:
        return False


def read_weights(path):
    """Every layer's learnable blobs from a weights file, in file order.

    Returns:
        A list of ``(layer_name, arrays)``; ``arrays[j]`` is param j as a float32 numpy
        array, or ``None`` where an HDF5 file has no dataset ``j`` (a shared param that
        Caffe does not store). Layers without params are listed with an empty list.

    Raises:
        CaffeError: the file is missing, unreadable, not a regular file (``/dev/zero``, a
            pipe), corrupt or not a weights file.
    """
    check_input_file(path, "weights file")
    if is_hdf5_weights(path):
        layers = _read_hdf5_weights(path)
    else:
        layers = _read_caffemodel_weights(path)
    _warn_non_finite(path, layers)
    return layers


def _warn_non_finite(path, layers):
    """One WARNING when params hold NaN or inf: Caffe would compute NaN without a word."""
    bad = [(name, j, array) for name, arrays in layers for j, array in enumerate(arrays)
           if array is not None and not np.isfinite(array).all()]
    if not bad:
        return
    name, j, array = bad[0]
    count = array.size - int(np.isfinite(array).sum())
    more = f" (and {len(bad) - 1} more params)" if len(bad) > 1 else ""
    LOG.warning(f"weights file '{path}': layer {name} param {j} holds {count} NaN or inf "
                f"values of {array.size}{more}; the net will compute NaN or inf from them")


# --- .caffemodel ------------------------------------------------------------------------------
def _read_caffemodel_weights(path):
    param = upgrade_net(read_net_param_binary(path), source=str(path))
    result = []
    for index, layer in enumerate(param.layer):
        name = layer.name
        arrays = []
        for j, blob in enumerate(layer.blobs):
            try:
                arrays.append(blob_proto_to_array(blob))
            except CaffeError as error:
                raise CaffeError(f"{path}: layer '{name or index}' param {j}: {error}",
                                 layer=name or None) from None
        result.append((name, arrays))
    return result


# --- HDF5 ---------------------------------------------------------------------------------
def _read_hdf5_weights(path):
    _check_readable(path)
    try:
        handle = h5py.File(path, "r")
    except H5PY_ERRORS as error:
        raise CaffeError(f"'{path}' is not a valid HDF5 weights file "
                         f"({h5py_detail(error)})") from None
    with handle:
        try:
            data = handle.get("data")
            is_group = isinstance(data, h5py.Group)
            layers = list(_layer_groups(data, "", set())) if is_group else None
        except H5PY_ERRORS as error:
            raise _damaged(path, "its list of layers", error) from None
        if not is_group:
            raise CaffeError(f"'{path}' has no 'data' group: it is not a Caffe HDF5 weights "
                             "file")
        return [(name, _read_hdf5_layer(path, name, group)) for name, group in layers]


def _damaged(path, what, error):
    return CaffeError(f"weights file '{path}' is damaged: cannot read {what} "
                      f"({h5py_detail(error)})")


def _check_readable(path):
    """Missing or unreadable files get the same message whatever the format."""
    try:
        with open(path, "rb"):
            pass
    except OSError as error:
        raise CaffeError(f"cannot read weights file '{path}': {error.strerror or error}") \
            from None


def _layer_groups(group, prefix, seen):
    """(layer name, group) pairs sorted by name, as HDF5's name index lists them.

    A layer name with "/" (GoogLeNet's "inception_3a/1x1") is stored as nested groups, so a
    group holding only groups is walked into; a group with datasets, or an empty one, is a
    layer. A group met again (a damaged file can link a group into itself) is skipped.
    """
    for key in sorted(group.keys(), key=lambda k: k.encode("utf-8")):
        child = group[key]   # not get(): that hides a damaged object as a missing one
        if not isinstance(child, h5py.Group) or child.id in seen:
            continue
        seen.add(child.id)
        name = f"{prefix}{key}"
        subgroups = [k for k in child.keys() if isinstance(child[k], h5py.Group)]
        if len(subgroups) < len(child) or not len(child):
            yield name, child
        if subgroups:
            yield from _layer_groups(child, name + "/", seen)


def _read_hdf5_layer(path, layer_name, group):
    found = {}
    try:
        keys = list(group.keys())
    except H5PY_ERRORS as error:
        raise _damaged(path, f"layer {layer_name}", error) from None
    for key in keys:
        try:
            item = group[key]
            if not isinstance(item, h5py.Dataset):
                continue
            kind = item.dtype.kind
        except H5PY_ERRORS as error:
            raise _damaged(path, f"dataset '{key}' of layer {layer_name}", error) from None
        if not (key.isascii() and key.isdigit()) or len(key) > _MAX_PARAM_DIGITS:
            LOG.warning(f"{path}: ignoring dataset '{key}' of layer {layer_name}: param "
                        "datasets are named 0, 1, ...")
            continue
        if kind != "f":
            raise CaffeError(f"{path}: dataset '{key}' of layer {layer_name} holds "
                             f"{item.dtype} values; expected float or double data",
                             layer=layer_name)
        found[int(key)] = _read_param(path, layer_name, key, item)
    arrays = [None] * (max(found) + 1 if found else 0)
    for index, array in found.items():
        arrays[index] = array
    return arrays


def _read_param(path, layer_name, key, dataset):
    what = f"dataset '{key}' of layer {layer_name}"
    try:
        return read_float32(dataset, f"{path}: {what}")
    except H5PY_ERRORS as error:
        raise _damaged(path, what, error) from None


def write_hdf5_weights(path, layers, write_diff=False):
    """Write weights in Caffe's Net::ToHDF5 layout (atomically).

    Args:
        path: the .h5 file to write.
        layers: ``[(layer_name, [(data, diff_or_None, owns_param), ...]), ...]`` in net
            order; every layer gets a group, params without params included.
        write_diff: also write group ``diff``. Diffs are written for every param, shared or
            not; data only for params that own themselves.

    Returns:
        The bytes written.

    Raises:
        CaffeError: two layers have the same name, or the file cannot be written.
    """
    def fill(handle):
        seen = set()
        data_group = handle.create_group("data")
        diff_group = handle.create_group("diff") if write_diff else None
        for layer_name, params in layers:
            if layer_name in seen:
                raise CaffeError(f"cannot save '{path}': two layers are named "
                                 f"'{layer_name}'", layer=layer_name)
            seen.add(layer_name)
            _write_hdf5_layer(data_group, diff_group, layer_name, params)
    return write_hdf5_atomically(path, fill)


def _write_hdf5_layer(data_group, diff_group, layer_name, params):
    layer_data = data_group.require_group(layer_name)
    layer_diff = diff_group.require_group(layer_name) if diff_group is not None else None
    for j, (data, diff, owns_param) in enumerate(params):
        if owns_param:
            layer_data.create_dataset(str(j), data=np.asarray(data, dtype=np.float32))
        if layer_diff is not None:
            if diff is None:
                raise ValueError(f"layer {layer_name} param {j}: write_diff needs the diff")
            layer_diff.create_dataset(str(j), data=np.asarray(diff, dtype=np.float32))
