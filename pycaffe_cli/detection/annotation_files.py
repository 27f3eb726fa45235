"""Annotation files as SSD's convert_annoset reads them (the fork's ReadXMLToAnnotatedDatum,
ReadJSONToAnnotatedDatum, ReadTxtToAnnotatedDatum in src/caffe/util/io.cpp): PASCAL VOC XML,
the fork's MS COCO JSON and ``label xmin ymin xmax ymax`` text, each turned into boxes in
pixels with their labels, and boxes added to an AnnotatedDatum normalized by the image's size.
pycaffe_cli/commands/convert_annoset.py describes the formats and where errors differ from
the fork."""
import json
import math
import xml.etree.ElementTree as ElementTree

import numpy as np

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.input_files import read_input_bytes
from pycaffe_cli.log import LOG

TOOL = "convert_annoset"


def add_box(anno_datum, label, box, labelfile, height, width):
    """Append a box (xmin, ymin, xmax, ymax, difficult; pixels of an image ``height`` x
    ``width``) to its label's group, made when the label first appears."""
    for group in anno_datum.annotation_group:
        if group.group_label == label:
            break
    else:
        group = anno_datum.annotation_group.add(group_label=label)
    xmin, ymin, xmax, ymax, difficult = box
    if min(xmin, ymin, xmax, ymax) < 0 or max(xmin, xmax) > width or max(ymin, ymax) > height:
        LOG.warning(f"{labelfile} bounding box exceeds image boundary.")
    if xmin > xmax or ymin > ymax:
        LOG.warning(f"{labelfile} bounding box irregular.")
    annotation = group.annotation.add(instance_id=len(group.annotation))
    bbox = annotation.bbox
    # float32 division, as the fork computes it
    bbox.xmin = np.float32(xmin) / np.float32(width)
    bbox.ymin = np.float32(ymin) / np.float32(height)
    bbox.xmax = np.float32(xmax) / np.float32(width)
    bbox.ymax = np.float32(ymax) / np.float32(height)
    bbox.difficult = bool(difficult)


def _annotation_text(labelfile):
    try:
        return read_input_bytes(labelfile, "annotation file")
    except CaffeError as error:
        raise CaffeError(f"{TOOL}: {error}") from None


def _bad(labelfile, problem):
    return CaffeError(f"{TOOL}: annotation file '{labelfile}': {problem}")


def _label_of(name, names, labelfile):
    if name not in names:
        raise _bad(labelfile, f"unknown class name '{name}' (not in the label map)")
    return names[name]


def _annotated_size(labelfile, height, width, declared):
    """The size the file declares ((height, width) texts; None where absent or not an integer:
    the image's own size then, with a warning as in the fork)."""
    try:
        size = (int(declared[0]), int(declared[1]))
    except (TypeError, ValueError):
        LOG.warning(f"When parsing {labelfile}: no valid image height/width; using the "
                    "image's size")
        size = (height, width)
    if size[0] != height:
        LOG.warning(f"{labelfile} inconsistent image height.")
    if size[1] != width:
        LOG.warning(f"{labelfile} inconsistent image width.")
    if size[0] == 0 or size[1] == 0:
        raise _bad(labelfile, "no valid image width/height")
    return size


def _number(text, what, labelfile):
    try:
        value = float(str(text).strip())
        if not math.isfinite(value):
            raise ValueError
        return value
    except (TypeError, ValueError):
        raise _bad(labelfile, f"{what} '{text}' is not a number") from None


def xml_boxes(labelfile, height, width, names):
    """((height, width), [(label, box)]) of a PASCAL VOC annotation (the fork's
    ReadXMLToAnnotatedDatum); the size is the one the file declares, which the boxes are
    normalized by."""
    data = _annotation_text(labelfile)
    try:
        root = ElementTree.fromstring(data)
    except ElementTree.ParseError as error:
        raise _bad(labelfile, f"not valid XML ({error})") from None
    if root.tag != "annotation":
        raise _bad(labelfile, f"the root element is <{root.tag}>, not <annotation>")
    size = root.find("size")
    declared = (None, None) if size is None else (size.findtext("height"),
                                                  size.findtext("width"))
    height, width = _annotated_size(labelfile, height, width, declared)
    boxes = []
    for number, item in enumerate(root.findall("object"), 1):
        label, difficult, boxed = None, False, False
        for child in item:
            text = (child.text or "").strip()
            if child.tag == "name":
                label = _label_of(text, names, labelfile)
            elif child.tag == "difficult":
                difficult = text == "1"
            elif child.tag == "bndbox":
                if label is None:
                    raise _bad(labelfile, f"object {number} has a <bndbox> before its <name>")
                corners = []
                for corner in ("xmin", "ymin", "xmax", "ymax"):
                    value = child.findtext(corner)
                    if value is None:
                        raise _bad(labelfile, f"object {number}'s <bndbox> has no <{corner}>")
                    corners.append(_number(value, corner, labelfile))
                boxes.append((label, (*corners, difficult)))
                boxed = True
        if label is not None and not boxed:
            raise _bad(labelfile, f"object {number} has no <bndbox>")
    return (height, width), boxes


def json_boxes(labelfile, height, width, names):
    """((height, width), [(label, box)]) of the fork's COCO-like JSON annotation
    (ReadJSONToAnnotatedDatum)."""
    data = _annotation_text(labelfile)
    try:
        tree = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise _bad(labelfile, f"not valid JSON ({error})") from None
    if not isinstance(tree, dict):
        raise _bad(labelfile, "expected a JSON object with 'image' and 'annotation'")
    image = tree.get("image") if isinstance(tree.get("image"), dict) else {}
    height, width = _annotated_size(labelfile, height, width,
                                    (image.get("height"), image.get("width")))
    objects = tree.get("annotation")
    if not isinstance(objects, list):
        raise _bad(labelfile, "no 'annotation' list")
    boxes = []
    for number, item in enumerate(objects, 1):
        if not isinstance(item, dict) or "category_id" not in item:
            raise _bad(labelfile, f"annotation {number} has no 'category_id'")
        category = item["category_id"]
        name = category if isinstance(category, str) else json.dumps(category)
        label = _label_of(name, names, labelfile)
        bbox = item.get("bbox")
        if not isinstance(bbox, list) or len(bbox) != 4:
            raise _bad(labelfile, f"annotation {number}'s 'bbox' is not [x, y, width, height]")
        x, y, w, h = (_number(value, "bbox value", labelfile) for value in bbox)
        iscrowd = item.get("iscrowd", 0)
        boxes.append((label, (x, y, x + w, y + h, bool(iscrowd))))
    return (height, width), boxes


def txt_boxes(labelfile, height, width, names):
    """((height, width), [(label, box)]) of ``label xmin ymin xmax ymax`` groups
    (ReadTxtToAnnotatedDatum): normalized by the image's size."""
    words = _annotation_text(labelfile).decode("utf-8", "replace").split()
    if len(words) % 5:
        raise _bad(labelfile, f"{len(words)} values: expected 'label xmin ymin xmax ymax' "
                              "groups of 5")
    boxes = []
    for start in range(0, len(words), 5):
        try:
            label = int(words[start])
        except ValueError:
            raise _bad(labelfile, f"the label '{words[start]}' is not an integer") from None
        corners = [_number(word, "coordinate", labelfile) for word in words[start + 1:start + 5]]
        boxes.append((label, (*corners, False)))
    return (height, width), boxes
