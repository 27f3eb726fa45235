"""Moving learnable weights between Nets and Caffe's weight files.

Caffe matches weights by layer name: a source layer with no namesake in the target net is
ignored (logged), and a namesake must have the same number and shapes of blobs.
"""
import numpy as np

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.weights import fill_blob_proto, read_weights, write_hdf5_weights
from pycaffe_cli.io.files import atomic_write
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2


def copy_trained_layers_from(net, path):
    """Load weights from a .caffemodel or .h5 file into ``net``'s same-named layers."""
    for layer_name, arrays in read_weights(path):
        layer_id = net.layer_id(layer_name)
        if layer_id is None:
            LOG.info(f"Ignoring source layer {layer_name}")
            continue
        _copy_layer(net, net.layer_entries[layer_id], arrays, path)


def _copy_layer(net, entry, arrays, path):
    """Copy one layer's arrays; a param missing from the file (None) is fine only if shared."""
    layer = entry.layer
    owned = [net.param_entries[i].owner < 0 for i in entry.param_ids]
    arrays = list(arrays) + [None] * (len(layer.blobs) - len(arrays))
    missing_owned = any(a is None and own for a, own in zip(arrays, owned))
    if len(arrays) > len(layer.blobs) or missing_owned:
        given = sum(a is not None for a in arrays)
        raise CaffeError(f"{path}: incompatible number of blobs for layer {layer.name}: the "
                         f"file has {given}, the net expects {len(layer.blobs)}")
    for j, array in enumerate(arrays):
        if array is None:
            continue
        target = layer.blobs[j]
        if not _shapes_match(target.shape, array.shape):
            raise CaffeError(
                f"{path}: cannot copy param {j} weights from layer '{layer.name}'; shape "
                f"mismatch. Source param shape is {_shape_string(array.shape)}; target param "
                f"shape is {target.shape_string()}. To learn this layer's parameters from "
                "scratch rather than copying from a saved net, rename the layer.")
        target.data[...] = array.reshape(target.shape)


def _shapes_match(target, source):
    """Equal shapes, or Caffe's legacy 4-d (num, channels, height, width) padding with 1s."""
    if tuple(target) == tuple(source):
        return True
    padded = (1,) * (4 - len(target)) + tuple(target)
    return len(source) == 4 and len(target) <= 4 and padded == tuple(source)


def _shape_string(shape):
    return "".join(f"{d} " for d in shape) + f"({int(np.prod(shape, dtype=np.int64))})"


def share_trained_layers_with(net, source):
    """Make ``net``'s same-named layers use ``source``'s weight storage (test nets)."""
    for source_name, source_layer in zip(source.layer_names, source.layers):
        if not net.has_layer(source_name):
            LOG.info(f"Ignoring source layer {source_name}")
            continue
        target = net.layer_by_name(source_name)
        if len(target.blobs) != len(source_layer.blobs):
            raise CaffeError(f"incompatible number of blobs for layer {source_name}")
        for j, (mine, theirs) in enumerate(zip(target.blobs, source_layer.blobs)):
            if mine.shape != theirs.shape:
                raise CaffeError(f"cannot share param {j} weights from layer "
                                 f"'{source_name}'; shape mismatch ({theirs.shape_string()} "
                                 f"vs {mine.shape_string()})")
            mine.share_data(theirs)


def net_to_proto(net, write_diff=False):
    """A NetParameter holding every layer's (post-split) parameters and blobs."""
    proto = caffe_pb2.NetParameter(name=net.name)
    for layer in net.layers:
        layer_proto = proto.layer.add()
        layer_proto.CopyFrom(layer.param)
        del layer_proto.blobs[:]
        for blob in layer.blobs:
            fill_blob_proto(layer_proto.blobs.add(), blob.cpu_data,
                            blob.cpu_diff if write_diff else None)
    return proto


def save_binaryproto(net, path, write_diff=False):
    """Write the net's weights as a binary NetParameter (atomically); return the bytes."""
    payload = net_to_proto(net, write_diff).SerializeToString()
    with atomic_write(path, "wb") as stream:
        stream.write(payload)
    return payload


def save_hdf5(net, path, write_diff=False):
    """Write the net's weights in Caffe's HDF5 layout (atomically); return the bytes."""
    layers = []
    for entry in net.layer_entries:
        arrays = []
        for blob, net_param_id in zip(entry.layer.blobs, entry.param_ids):
            arrays.append((blob.cpu_data, blob.cpu_diff if write_diff else None,
                           net.param_entries[net_param_id].owner < 0))
        layers.append((entry.name, arrays))
    return write_hdf5_weights(path, layers, write_diff)
