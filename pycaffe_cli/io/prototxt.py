"""Reading and writing Caffe's protobuf files: text prototxts and binary protos.

Text parse errors are reported as ``path:line:col: message`` (1-based, as protoc and Caffe
print them), so an editor can jump to the mistake. Binary files that do not decode, or that
decode to something that cannot be what the caller asked for, are rejected with a message
naming the file instead of being half-loaded.
"""
import re

from google.protobuf import message as protobuf_message
from google.protobuf import text_encoding, text_format

from pycaffe_cli.errors import CaffeError, located
from pycaffe_cli.io.files import atomic_write, read_bytes
from pycaffe_cli.io.foreign import parse_error_hint
from pycaffe_cli.io.input_files import PROTO_LIMIT, PROTOTXT_LIMIT
from pycaffe_cli.io.path_fields import check_path_fields
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.sizes import check_parse_memory


# --- text ---------------------------------------------------------------------------------
def _parse_text(path, data, proto):
    check_parse_memory(path, len(data))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise CaffeError(f"{path}:{line}:{column}: the file is not UTF-8 text") from None
    try:
        text_format.Parse(text, proto)
    except text_format.ParseError as error:
        raise CaffeError(_parse_error_message(path, error)) from None
    return proto


def _parse_error_message(path, error):
    """``path:line:col: message`` from protobuf's ``line:col : message`` error."""
    line, column = error.GetLine(), error.GetColumn()
    message = str(error)
    if line is None:
        return f"{path}: {message}"
    location = f"{line}" if column is None else f"{line}:{column}"
    prefix = f"{location} : "
    if message.startswith(prefix):
        message = message[len(prefix):]
    hint = parse_error_hint(message)
    if hint:
        message = f"{message.rstrip('.')}: {hint}"
    return f"{path}:{location}: {message}"


def read_text_proto(path, proto, what="prototxt file"):
    """Parse the text-format file ``path`` into the (fresh) message ``proto`` and return it."""
    return _parse_text(path, read_bytes(path, what, PROTOTXT_LIMIT), proto)


def read_net_param(path):
    """Read a net prototxt into a ``caffe.NetParameter`` (not yet upgraded; see upgrade_net).

    Raises:
        CaffeError: ``cannot read net file 'x': <reason>`` or ``x:line:col: <parse error>``.
    """
    return read_text_proto(path, caffe_pb2.NetParameter(), "net file")


def read_solver_param(path):
    """Read a solver prototxt into a ``caffe.SolverParameter`` (see upgrade_solver).

    Raises:
        CaffeError: as read_net_param, or a file field (net, snapshot_prefix, ...) holds a
            path that can name no file (a NUL byte, too long).
    """
    param = read_text_proto(path, caffe_pb2.SolverParameter(), "solver file")
    try:
        check_path_fields(param)
    except CaffeError as error:
        raise located(error, path) from None
    return param


def write_text_proto(path, proto):
    """Write ``proto`` in text format to ``path`` (atomically)."""
    with atomic_write(path, "w") as stream:
        stream.write(text_format.MessageToString(proto))


# --- binary -------------------------------------------------------------------------------
def _not_valid(path, type_name, reason):
    return CaffeError(f"'{path}' is not a valid Caffe binary proto ({type_name}): {reason}")


def read_binary_proto(path, proto, what="binary proto file"):
    """Parse the binary protobuf file ``path`` into the (fresh) message ``proto``.

    Raises:
        CaffeError: the file is missing or unreadable, empty, or does not decode.
    """
    data = read_bytes(path, what, PROTO_LIMIT)
    type_name = proto.DESCRIPTOR.name
    if not data:
        raise _not_valid(path, type_name, "the file is empty")
    try:
        proto.ParseFromString(data)
    except (protobuf_message.DecodeError, RuntimeError, ValueError) as error:
        raise _not_valid(path, type_name, f"it does not decode ({error})") from None
    return proto


def read_net_param_binary(path):
    """Read a ``.caffemodel`` (binary NetParameter; not yet upgraded, see upgrade_net).

    Protobuf decodes many byte strings that were never protos; a result with neither
    ``layer`` nor legacy ``layers`` entries is rejected as well.
    """
    param = read_binary_proto(path, caffe_pb2.NetParameter(), "weights file")
    if not param.layer and not param.layers:
        raise _not_valid(path, "NetParameter", "it holds no layers")
    return param


def read_blob_proto(path, what="blob file"):
    """Read a ``.binaryproto`` BlobProto (a mean file, for instance)."""
    blob = read_binary_proto(path, caffe_pb2.BlobProto(), what)
    if not blob.data and not blob.double_data:
        raise _not_valid(path, "BlobProto", "it holds no data")
    return blob


def write_binary_proto(path, proto):
    """Serialise ``proto`` to ``path`` (atomically)."""
    payload = proto.SerializeToString()
    with atomic_write(path, "wb") as stream:
        stream.write(payload)


def write_blob_proto(path, proto):
    """Write a BlobProto as a ``.binaryproto`` file (atomically)."""
    write_binary_proto(path, proto)


# --- locating layers and fields in a prototxt, for error messages -------------------------
_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|#[^\n]*|[{}]|[A-Za-z_]\w*|\n')
_NAME = re.compile(r'\s*:\s*("(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\')')
_FIELD_SEPARATOR = re.compile(r"[ \t]*[:{]")
_LAYER_BLOCKS = ("layer", "layers")


def _find_layer_line(text, layer_name):
    """Line (1-based) of the ``name:`` of the first top-level layer called ``layer_name``."""
    stack, last_word, line = [], None, 1
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token == "\n":
            line += 1
        elif token == "{":
            stack.append(last_word)
            last_word = None
        elif token == "}":
            if stack:
                stack.pop()
            last_word = None
        elif token[0] in "\"'#":
            last_word = None
        else:
            last_word = token
            if token == "name" and _is_layer_block(stack):
                value = _NAME.match(text, match.end())
                if value and _unquote(value.group(1)) == layer_name:
                    return line
    return None


def _is_layer_block(stack):
    """Directly inside ``layer {}`` / ``layers {}``, or a V0 ``layers { layer {} }``."""
    if len(stack) == 1:
        return stack[0] in _LAYER_BLOCKS
    return stack == ["layers", "layer"]


def _unquote(literal):
    body = literal[1:-1]
    if "\\" not in body:
        return body
    return text_encoding.CUnescape(body).decode("utf-8", errors="replace")


def locate_layer(path, layer_name):
    """``path:line`` of layer ``layer_name``'s definition in the prototxt, else ``path``."""
    try:
        text = read_bytes(path, "net file", PROTOTXT_LIMIT).decode("utf-8", "replace")
    except CaffeError:
        return str(path)
    line = _find_layer_line(text, layer_name)
    return f"{path}:{line}" if line else str(path)


def _find_field_line(text, field, occurrence):
    """Line (1-based) of the ``occurrence``-th (0-based) top-level ``field:`` or ``field {``."""
    depth, seen, line = 0, 0, 1
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token == "\n":
            line += 1
        elif token == "{":
            depth += 1
        elif token == "}":
            depth = max(depth - 1, 0)
        elif depth == 0 and token == field and _FIELD_SEPARATOR.match(text, match.end()):
            if seen == occurrence:
                return line
            seen += 1
    return None


def locate_field(path, field, occurrence=0):
    """``path:line`` of top-level field ``field`` (its ``occurrence``-th entry, for a repeated
    field) in the prototxt ``path``, else ``path``: a solver error points at the value."""
    try:
        text = read_bytes(path, "solver file", PROTOTXT_LIMIT).decode("utf-8", "replace")
    except CaffeError:
        return str(path)
    line = _find_field_line(text, field, occurrence)
    return f"{path}:{line}" if line else str(path)
