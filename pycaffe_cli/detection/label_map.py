"""SSD's label maps: the ``LabelMap`` prototxt that names the classes of a detection data set.

A label map lists ``item { name: "dog" label: 12 display_name: "dog" }`` entries; label 0 is
the background by SSD's convention. These are the fork's util/io.cpp helpers:

- ``read_label_map`` reads the prototxt (ReadProtoFromTextFile; a parse error names the file,
  line and column),
- ``name_to_label``, ``label_to_name``, ``label_to_display_name`` are MapNameToLabel,
  MapLabelToName and MapLabelToDisplayName: with ``strict`` a repeated key is an error, else
  the last item wins, as in the fork,
- ``label_map_from_label_file`` is ReadLabelFileToLabelMap (a plain list of class names).
"""
import re

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.input_files import read_input_text
from pycaffe_cli.io.prototxt import read_text_proto
from pycaffe_cli.proto import caffe_pb2


def read_label_map(path):
    """The ``caffe.LabelMap`` in the prototxt file ``path``.

    Raises:
        CaffeError: the file is missing or unreadable, or not a LabelMap prototxt (the message
            is ``path:line:column: ...``).
    """
    return read_text_proto(path, caffe_pb2.LabelMap(), "label map file")


def _mapping(label_map, key, value, strict, what, where):
    mapping = {}
    for item in label_map.item:
        item_key = getattr(item, key)
        if strict and item_key in mapping:
            raise CaffeError(f"{where}: there are several items with {what} {item_key!r}; "
                             "each must be unique")
        mapping[item_key] = getattr(item, value)
    return mapping


def name_to_label(label_map, strict=True, where="label map"):
    """{name: label} (the fork's MapNameToLabel); ``where`` names the map in errors."""
    return _mapping(label_map, "name", "label", strict, "name", where)


def label_to_name(label_map, strict=True, where="label map"):
    """{label: name} (the fork's MapLabelToName)."""
    return _mapping(label_map, "label", "name", strict, "label", where)


def label_to_display_name(label_map, strict=True, where="label map"):
    """{label: display_name} (the fork's MapLabelToDisplayName)."""
    return _mapping(label_map, "label", "display_name", strict, "label", where)


def label_map_from_label_file(path, include_background=False, delimiter=" :;"):
    """A LabelMap from a text file of ``name [label] [display_name]`` lines (the fork's
    ReadLabelFileToLabelMap): the fields are split at any character of ``delimiter``; one
    field numbers the classes in order, two give the label, three the display name too.
    ``include_background`` puts ``none_of_the_above`` (label 0, "background") first.

    Where the fork reads a non-number label as 0 (atoi) and takes lines of different field
    counts as a crash, both are errors naming the line here; blank lines are skipped.
    """
    label_map = caffe_pb2.LabelMap()
    label = 0
    if include_background:
        label_map.item.add(name="none_of_the_above", label=0, display_name="background")
        label = 1
    pattern = "[" + re.escape(delimiter) + "]"
    field_count = None
    for number, line in enumerate(read_input_text(path, "label file").splitlines(), 1):
        if not line.strip():
            continue
        fields = re.split(pattern, line)
        if field_count is None:
            field_count = len(fields)
        if len(fields) != field_count or not 1 <= len(fields) <= 3:
            raise CaffeError(f"{path}:{number}: expected the same 1 to 3 fields (name [label] "
                             f"[display_name]) on every line, got {len(fields)}")
        if len(fields) > 1:
            try:
                label = int(fields[1])
            except ValueError:
                raise CaffeError(f"{path}:{number}: the label '{fields[1]}' is not an "
                                 "integer") from None
        display_name = fields[2] if len(fields) == 3 else fields[0]
        label_map.item.add(name=fields[0], label=label, display_name=display_name)
        if len(fields) == 1:
            label += 1
    return label_map
