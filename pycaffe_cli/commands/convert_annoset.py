"""``pycaffe convert_annoset``: the SSD fork's tools/convert_annoset.cpp (weiliu89/caffe branch
ssd); the annotation readers are in pycaffe_cli/detection/annotation_files.py.

convert_annoset reads a list of ``image annotation`` lines (``--anno_type=detection``) or
``image label`` lines (``classification``), reads each image (ROOTFOLDER + path) and its
annotation file, and stores an AnnotatedDatum under the key ``"%08d_%s" % (line index, image
path)`` in a new LMDB/LevelDB. Boxes are stored relative to the original image's size
(0..1), grouped by label in order of first appearance, each with its instance id (0, 1, ...
within its group) and difficult flag; the Datum's label is -1. Annotation files:

- ``xml`` (PASCAL VOC): ``annotation/size/{width,height}`` and ``object`` elements holding
  ``name``, ``difficult`` and ``bndbox/{xmin,ymin,xmax,ymax}`` in pixels; a ``difficult``
  after its ``bndbox`` does not count, as in the fork.
- ``json`` (the fork's MS COCO form): ``{"image": {"width", "height"}, "annotation":
  [{"category_id", "iscrowd", "bbox": [x, y, w, h]}]}``; iscrowd is stored as difficult.
- ``txt``: ``label xmin ymin xmax ymax`` per box, in pixels, labels as numbers.

Names map to labels through ``--label_map_file`` (a LabelMap prototxt). ``--min_dim`` /
``--max_dim`` scale an image keeping its aspect ratio (the smaller side up to min_dim, the
larger down to max_dim); ``--resize_height`` / ``--resize_width`` resize to a fixed size.

Where this differs from the fork (each a case where the fork crashes, corrupts data silently,
or cannot be repeated):

- An unknown class name, an unreadable or malformed annotation file, a missing annotation
  file, an object without a box, a box coordinate that is missing or not a number, and a
  malformed list line are errors naming the file (and line); the database is written under
  a temporary name and renamed only when complete, so none is left behind. (The fork aborts
  on the first two, stores an image without boxes for a missing file, a zero box for an
  object without one, reads "12.5" or a missing coordinate as 0, and reads a list of
  mismatched tokens out of step.) Coordinates with a fraction are taken as they are.
- Unreadable images are skipped with a warning and counted, as in the fork.
- ``--shuffle`` draws from pycaffe's random source (``--seed N`` makes it repeatable).
- Negative sizes are refused (the fork takes them as 0); ``--check_size`` with encoded images
  is refused up front (the fork fails on the second image).
- Scaling by ``--min_dim`` / ``--max_dim`` gives the size OpenCV gives (the scaled side
  rounded to nearest) and resamples by that size; OpenCV's sampling positions use the scale
  factor itself, which can differ by a fraction of a pixel.
"""
import collections

import click
import numpy as np

from pycaffe_cli.commands import subcommand
from pycaffe_cli.commands.convert_imageset import TOOL_FLAGS as IMAGESET_FLAGS
from pycaffe_cli.commands.convert_imageset import (_image_path, checked_encoding, checked_size,
                                                    shuffled)
from pycaffe_cli.data.db import backend_from_name
from pycaffe_cli.detection.annotation_files import add_box, json_boxes, txt_boxes, xml_boxes
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.input_files import IMAGE_LIMIT, read_input_bytes, read_input_text
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.threads import map_ahead

TOOL = "convert_annoset"
ANNOSET_FLAGS = {
    "anno_type": dict(default="classification", show_default=True,
                      type=click.Choice(["classification", "detection"]),
                      help="The type of annotation {classification, detection}."),
    "label_type": dict(default="xml", show_default=True, type=click.Choice(["xml", "json", "txt"]),
                       help="The type of annotation file format."),
    "label_map_file": dict(default="", metavar="FILE",
                           help="A file with LabelMap protobuf message."),
    "check_label": dict(is_flag=True, default=False,
                        help="When this option is on, check that there is no duplicated "
                             "name/label."),
    "min_dim": dict(default=0, type=click.IntRange(min=0), show_default=True,
                    help="Minimum dimension images are resized to (keep same aspect ratio)."),
    "max_dim": dict(default=0, type=click.IntRange(min=0), show_default=True,
                    help="Maximum dimension images are resized to (keep same aspect ratio)."),
}
ANNOSET_FLAGS.update(IMAGESET_FLAGS)


@subcommand(TOOL, flags=(), summary="convert a set of images and annotations to a leveldb/lmdb",
            arguments=("ROOTFOLDER", "LISTFILE", "DB_NAME"), own_flags=ANNOSET_FLAGS)
def convert_annoset(rootfolder, listfile, db_name, anno_type, label_type, label_map_file,
                    check_label, min_dim, max_dim, gray, shuffle, backend, resize_width,
                    resize_height, check_size, encoded, encode_type, seed):
    """Convert a set of images and annotations to the leveldb/lmdb format used as input for
    Caffe (SSD's AnnotatedData layer).

    ROOTFOLDER/ holds the images and annotation files; LISTFILE has one
    "img/1.jpg anno/1.xml" line per image (--anno_type=detection) or "img/1.jpg 7"
    (classification); DB_NAME is the database to create.
    """
    db_backend = backend_from_name(backend)
    detection = anno_type == "detection"
    names = None
    if detection and (label_type != "txt" or label_map_file):
        if not label_map_file:
            raise CaffeError(f"{TOOL}: --anno_type=detection with --label_type={label_type} "
                             "needs --label_map_file (a LabelMap prototxt)")
        from pycaffe_cli.detection.label_map import name_to_label, read_label_map
        names = name_to_label(read_label_map(label_map_file), strict=check_label,
                              where=label_map_file)
    lines = shuffled(read_pairs(listfile, integer_second=not detection, tool=TOOL), shuffle,
                     seed)
    encoded = checked_encoding(TOOL, encoded, encode_type, check_size)
    if (resize_height > 0) != (resize_width > 0) and not (min_dim or max_dim):
        LOG.warning(f"{TOOL}: images are resized only when both --resize_height and "
                    "--resize_width are set; keeping the original sizes")
    sizes = _Sizes(resize_height, resize_width, min_dim, max_dim)
    reader = _Reader(rootfolder, sizes, not gray, encoded, encode_type,
                     label_type if detection else None, names)
    skipped = _write(reader, lines, db_name, db_backend, check_size)
    if skipped:
        LOG.warning(f"Skipped {skipped} of {len(lines)} images that could not be read.")
    return 0


def read_pairs(path, integer_second, tool):
    """[(first, second)] from the list file's two-field lines (blank lines skipped); the second
    field an int when ``integer_second``. Fields are separated by white space, as the fork
    reads them, so paths cannot hold spaces."""
    expected = "IMAGE LABEL' with an integer label" if integer_second else "IMAGE ANNOTATION'"
    return [(first, second) for _, first, second
            in numbered_pairs(path, "LISTFILE", integer_second, expected, tool)]


def numbered_pairs(path, what, integer_second, expected, tool):
    """(line number, first, second) for each two-field line of the text file ``path``
    (``what`` names it in errors; ``expected`` describes a good line)."""
    try:
        text = read_input_text(path, what)
    except CaffeError as error:
        raise CaffeError(f"{tool}: {error}") from None
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        try:
            if len(fields) != 2:
                raise ValueError
            yield number, fields[0], int(fields[1]) if integer_second else fields[1]
        except ValueError:
            raise CaffeError(f"{tool}: {path}:{number}: expected '{expected}, got "
                             f"'{line.strip()}'") from None


class _Sizes(collections.namedtuple("_Sizes", "height width min_dim max_dim")):
    """The resize flags, with the fork's ReadImageToCVMat rule for the output size."""

    def any(self):
        return bool(self.height or self.width or self.min_dim or self.max_dim)

    def target(self, height, width):
        """(height, width) an image of that size is resized to; min_dim/max_dim win."""
        if self.min_dim > 0 or self.max_dim > 0:
            scale = np.float32(1)
            if self.min_dim > 0 and min(height, width) < self.min_dim:
                scale = np.float32(self.min_dim) / np.float32(min(height, width))
            if self.max_dim > 0 and int(scale * np.float32(max(height, width))) > self.max_dim:
                scale = np.float32(self.max_dim) / np.float32(max(height, width))
            if scale == 1:
                return height, width
            # cv::resize with fx = fy = scale: each side is round-half-even(side * scale)
            return (max(int(np.rint(height * float(scale))), 1),
                    max(int(np.rint(width * float(scale))), 1))
        if self.height > 0 and self.width > 0:
            return self.height, self.width
        return height, width


def _matches_extension(filename, encoding):
    """The SSD fork's matchExt: the extension after the last dot (lower case) equals the
    encoding as given (so a guessed ".jpg" never matches: the image is encoded anew)."""
    extension = filename[filename.rfind(".") + 1:].lower()
    encoding = encoding.lower()
    return extension == encoding or (encoding == "jpg" and extension == "jpeg")


class _Reader:
    """Reads one list line into an AnnotatedDatum (the fork's ReadRichImageToAnnotatedDatum,
    or ReadImageToDatum for classification)."""

    def __init__(self, rootfolder, sizes, is_color, encoded, encode_type, label_type, names):
        self.rootfolder, self.sizes, self.is_color = rootfolder, sizes, is_color
        self.encoded, self.encode_type = encoded, encode_type
        self.label_type, self.names = label_type, names

    def read(self, line):
        """(image path, AnnotatedDatum or None when the image cannot be read).

        Raises:
            CaffeError: the annotation file is missing or wrong.
        """
        from pycaffe_cli.data.image import decode_image
        from pycaffe_cli.data.image_datum import encode_image, image_to_datum
        from pycaffe_cli.data.linear_resize import resize_linear
        filename, second = line
        path = _image_path(self.rootfolder, filename)
        try:
            data = read_input_bytes(path, "image file", IMAGE_LIMIT)
            pixels = decode_image(data, self.is_color, f"image file {path!r}")
        except CaffeError:
            return path, None
        height, width = pixels.shape[1:]
        target = self.sizes.target(height, width)
        if target != (height, width):
            pixels = resize_linear(pixels, *target)
        label = -1 if self.label_type else second
        anno_datum = caffe_pb2.AnnotatedDatum()
        encoding = self.encode_type or (_guess_encoding(filename) if self.encoded else "")
        if not encoding:
            anno_datum.datum.CopyFrom(image_to_datum(pixels, label))
        elif not self.sizes.any() and _matches_extension(filename, encoding):
            anno_datum.datum.data, anno_datum.datum.encoded = data, True
            anno_datum.datum.label = label
        else:
            datum = anno_datum.datum
            datum.data = encode_image(pixels, encoding)
            datum.channels, datum.height, datum.width = pixels.shape
            datum.encoded, datum.label = True, label
        if self.label_type:
            anno_datum.type = caffe_pb2.AnnotatedDatum.BBOX
            labelfile = _image_path(self.rootfolder, second)
            parse = {"xml": xml_boxes, "json": json_boxes, "txt": txt_boxes}[self.label_type]
            (box_height, box_width), boxes = parse(labelfile, height, width, self.names)
            for label, box in boxes:
                add_box(anno_datum, label, box, labelfile, box_height, box_width)
        return path, anno_datum


def _guess_encoding(filename):
    """The file's extension with its dot, lower case (the fork's guess); "png" without one."""
    dot = filename.rfind(".")
    if dot < 0:
        LOG.warning(f"Failed to guess the encoding of '{filename}'; encoding it as png")
        return "png"
    return filename[dot:].lower()


def _write(reader, lines, db_name, db_backend, check_size):
    """Store every readable image; return how many were skipped."""
    from pycaffe_cli.data.image_datum import DatumWriter
    data_size = None
    skipped = 0
    with DatumWriter(db_name, db_backend, tool=TOOL) as writer:
        for line_id, (path, anno_datum) in enumerate(map_ahead(reader.read, lines, TOOL)):
            if anno_datum is None:
                LOG.warning(f"Failed to read {lines[line_id][0]} (could not open or decode "
                            f"{path})")
                skipped += 1
                continue
            datum = anno_datum.datum
            if check_size:
                data_size = checked_size(data_size, datum, TOOL, path)
            writer.put(f"{line_id:08d}_{lines[line_id][0]}", anno_datum)
    return skipped

