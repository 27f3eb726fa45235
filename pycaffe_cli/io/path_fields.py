"""The file fields of nets and solvers, checked for paths that can name no file.

A prototxt can hold ``source: "a\\000b"`` or a snapshot_prefix longer than the system allows;
the operating system would refuse them only when the file is opened (Python with a ValueError,
deep inside a layer). ``check_path_fields`` finds them when the net or solver is read and names
the field (and its layer).
"""
from google.protobuf.descriptor import FieldDescriptor

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.input_files import path_problem, shown

# String fields of caffe.proto that name files or folders (or a prefix of one).
PATH_FIELDS = frozenset({"net", "train_net", "test_net", "snapshot_prefix", "source",
                         "mean_file", "meanfile", "file_name", "root_folder"})
# Fields holding several paths separated by ",".
PATH_LIST_FIELDS = frozenset({"weights"})
_LAYER_MESSAGES = ("LayerParameter", "V1LayerParameter", "V0LayerParameter")


def _values(field, value):
    return list(value) if field.is_repeated else [value]


def path_values(message, layer=None, prefix=""):
    """Yield ``(layer name or None, field path, path)`` for every file field set in
    ``message`` and the messages inside it; a field path is relative to its layer
    ("hdf5_data_param.source") or to ``message`` ("snapshot_prefix")."""
    if message.DESCRIPTOR.name in _LAYER_MESSAGES and message.name:
        layer, prefix = message.name, ""
    for field, value in message.ListFields():
        name = prefix + field.name
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            for item in _values(field, value):
                yield from path_values(item, layer, name + ".")
        elif field.type == FieldDescriptor.TYPE_STRING and field.name in PATH_FIELDS:
            for item in _values(field, value):
                yield layer, name, item
        elif field.type == FieldDescriptor.TYPE_STRING and field.name in PATH_LIST_FIELDS:
            for item in _values(field, value):
                for part in item.split(","):
                    yield layer, name, part.strip()


def check_path_fields(message):
    """Raise CaffeError for the first file field of ``message`` (a NetParameter or
    SolverParameter) whose value can name no file; its ``layer`` is set where the field
    belongs to a layer, so that the caller can point at the layer's line.

    Empty values are left to the code that reads the field (many are optional).
    """
    for layer, field, path in path_values(message):
        problem = path_problem(path) if path else None
        if problem:
            owner = f'layer "{layer}": ' if layer else ""
            raise CaffeError(f"{owner}{field} '{shown(path)}': {problem}", layer=layer)
