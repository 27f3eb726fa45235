"""Fast conversion between numpy arrays and caffe.BlobProto.

Going through Python floats is the slow part of big weight files (``proto.data.extend``,
``proto.data[:] = arr``, ``np.array(proto.data)``). Protobuf's C parser and serialiser copy
packed floats as raw bytes, so we hand it (and take from it) the packed wire record instead,
several times faster (docs/kernel-choices.md, "Weight blobs as packed records"). Field
numbers are BlobProto's (caffe.proto): data = 5, diff = 6, double_data = 8, double_diff = 9,
all ``[packed = true]``.
"""
import numpy as np

from pycaffe_cli.errors import CaffeError

_DATA, _DIFF, _DOUBLE_DATA, _DOUBLE_DIFF = 5, 6, 8, 9
_LENGTH_DELIMITED = 2
_LEGACY_AXES = ("num", "channels", "height", "width")


def _varint(value):
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _packed_record(field_number, array, dtype):
    """The wire bytes of a packed repeated field holding ``array`` as ``dtype``."""
    flat = np.asarray(array).reshape(-1)
    header = _varint(field_number << 3 | _LENGTH_DELIMITED)
    header += _varint(flat.size * np.dtype(dtype).itemsize)
    record = bytearray(len(header) + flat.size * np.dtype(dtype).itemsize)
    record[:len(header)] = header
    np.frombuffer(record, dtype, flat.size, len(header))[...] = flat
    return record


def fill_blob_proto(proto, array, diff=None):
    """Write ``array`` (and ``diff``) into ``proto`` as Caffe's Blob::ToProto does.

    The shape goes to ``shape.dim`` (left unset for a 0-axis array, as Caffe leaves it),
    the values to the packed float ``data`` (and ``diff``) fields. Any earlier contents,
    legacy 4-D fields and double fields included, are cleared.
    """
    array = np.asarray(array)
    for field in ("shape", "data", "diff", "double_data", "double_diff") + _LEGACY_AXES:
        proto.ClearField(field)
    if array.ndim:
        proto.shape.dim.extend(int(d) for d in array.shape)
    proto.MergeFromString(_packed_record(_DATA, array, "<f4"))
    if diff is not None:
        diff = np.asarray(diff)
        if diff.size != array.size:
            raise ValueError(f"diff has {diff.size} values, data {array.size}")
        proto.MergeFromString(_packed_record(_DIFF, diff, "<f4"))
    return proto


def blob_proto_shape(proto):
    """The blob's shape: the legacy (num, channels, height, width) when any is set, as in
    Caffe's Blob::FromProto, else ``shape.dim``."""
    if any(proto.HasField(axis) for axis in _LEGACY_AXES):
        return tuple(int(getattr(proto, axis)) for axis in _LEGACY_AXES)
    return tuple(int(d) for d in proto.shape.dim)


def _read_varint(buffer, position):
    value, shift = 0, 0
    while True:
        byte = buffer[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def _packed_fields(serialized):
    """{field number: memoryview of its payload} for the length-delimited fields."""
    view, position, found = memoryview(serialized), 0, {}
    while position < len(view):
        key, position = _read_varint(view, position)
        wire_type = key & 7
        if wire_type == 0:
            _, position = _read_varint(view, position)
        elif wire_type == 1:
            position += 8
        elif wire_type == 5:
            position += 4
        elif wire_type == _LENGTH_DELIMITED:
            length, position = _read_varint(view, position)
            found.setdefault(key >> 3, []).append(view[position:position + length])
            position += length
        else:
            return None
    return found


def _values(proto, serialized_fields, float_field, double_field):
    """float32 values of the double field when it has any, else of the float field."""
    for number, name, dtype in ((double_field, _field_name(double_field), "<f8"),
                                (float_field, _field_name(float_field), "<f4")):
        if not len(getattr(proto, name)):
            continue
        chunks = serialized_fields.get(number) if serialized_fields is not None else None
        if chunks is not None and len(chunks) == 1:
            return np.frombuffer(chunks[0], dtype).astype(np.float32)
        return np.array(getattr(proto, name), dtype=np.float32)
    return np.zeros(0, np.float32)


def _field_name(number):
    return {_DATA: "data", _DIFF: "diff", _DOUBLE_DATA: "double_data",
            _DOUBLE_DIFF: "double_diff"}[number]


def blob_proto_to_array(proto, diff=False):
    """A float32 array of the blob's data (or diff) in its shape (Caffe's Blob::FromProto).

    ``double_data`` wins over ``data`` when present, as in Caffe; values are rounded to
    float32.

    Raises:
        CaffeError: the number of values does not match the shape.
    """
    shape = blob_proto_shape(proto)
    count = int(np.prod(shape, dtype=np.int64))
    fields = _packed_fields(proto.SerializeToString())
    if diff:
        values = _values(proto, fields, _DIFF, _DOUBLE_DIFF)
    else:
        values = _values(proto, fields, _DATA, _DOUBLE_DATA)
    if values.size != count:
        what = "diff" if diff else "data"
        raise CaffeError(f"blob of shape {_shape_string(shape)} holds {values.size} {what} "
                         f"values; it needs {count}")
    return values.reshape(shape)


def _shape_string(shape):
    return "".join(f"{d} " for d in shape) + f"({int(np.prod(shape, dtype=np.int64))})"
