"""``pycaffe convert_imageset``: Caffe's tools/convert_imageset.cpp.

Reads a list of ``path label`` lines, reads each image (ROOTFOLDER + path) and stores it as a
Datum under the key ``"%08d_%s" % (line index, path)`` in a new LMDB/LevelDB, committing
every 1000 images. Choices where Caffe leaves things undefined or crashes:

- ``--shuffle`` draws from pycaffe's random source; Caffe seeds its shuffle from the system
  entropy, so its order is not repeatable. ``--seed N`` (a pycaffe addition) makes it so.
- A list line is split at its last space (paths may contain spaces); blank lines are
  skipped, a line without a label or with a non-integer label is an error (Caffe's atoi
  would read 0).
- A ROOTFOLDER without a trailing "/" is still a folder (Caffe pastes the strings together).
- Images that cannot be read are skipped with a warning, as Caffe does, and counted at the
  end; their line index stays unused in the keys.
- ``--check_size`` with encoded images is refused up front (Caffe fails on the 2nd image).
- A negative ``--resize_height`` / ``--resize_width`` is refused (Caffe reads it as 0: no
  resize).
- The database is written under a temporary name beside DB_NAME and renamed when complete
  (data/db.py's NewDatabase), so a failed run (a full disk, a read-only folder, an image of
  the wrong size under ``--check_size``) leaves none behind; an existing DB_NAME is refused
  before any image is read, as Caffe's mkdir CHECK refuses it.
"""

import click

from pycaffe_cli.backend import rng, set_random_seed
from pycaffe_cli.commands import subcommand
from pycaffe_cli.data.db import backend_from_name
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.input_files import read_input_text
from pycaffe_cli.log import LOG
from pycaffe_cli.threads import map_ahead

TOOL_FLAGS = {
    "gray": dict(is_flag=True, default=False,
                 help="When this option is on, treat images as grayscale ones."),
    "shuffle": dict(is_flag=True, default=False,
                    help="Randomly shuffle the order of images and their labels."),
    "backend": dict(default="lmdb", show_default=True, metavar="lmdb|leveldb",
                    help="The backend {lmdb, leveldb} for storing the result."),
    # Caffe resizes only when both are > 0 and takes a negative size as 0; refused here
    "resize_width": dict(default=0, type=click.IntRange(min=0), show_default=True,
                         help="Width images are resized to (0: keep; needs resize_height)."),
    "resize_height": dict(default=0, type=click.IntRange(min=0), show_default=True,
                          help="Height images are resized to (0: keep; needs resize_width)."),
    "check_size": dict(is_flag=True, default=False,
                       help="When this option is on, check that all the datum have the "
                            "same size."),
    "encoded": dict(is_flag=True, default=False,
                    help="When this option is on, the encoded image will be saved in datum."),
    "encode_type": dict(default="", metavar="TYPE",
                        help="Optional: what type should we encode the image as "
                             "('png', 'jpg', ...)."),
    "seed": dict(default=None, type=int, metavar="N",
                 help="Seed for --shuffle, to make the order repeatable (pycaffe addition)."),
}


@subcommand("convert_imageset", flags=(), summary="convert a set of images to a leveldb/lmdb",
            arguments=("ROOTFOLDER", "LISTFILE", "DB_NAME"), own_flags=TOOL_FLAGS)
def convert_imageset(rootfolder, listfile, db_name, gray, shuffle, backend, resize_width,
                     resize_height, check_size, encoded, encode_type, seed):
    """Convert a set of images to the leveldb/lmdb format used as input for Caffe.

    ROOTFOLDER/ holds the images; LISTFILE has one "subfolder1/file1.JPEG 7" line per image;
    DB_NAME is the database to create.
    """
    db_backend = backend_from_name(backend)
    lines = shuffled(read_list_file(listfile), shuffle, seed)
    encoded = checked_encoding("convert_imageset", encoded, encode_type, check_size)
    height, width = resize_height, resize_width
    if (height > 0) != (width > 0):
        LOG.warning("convert_imageset: images are resized only when both --resize_height "
                    "and --resize_width are set; keeping the original sizes")
    skipped = _write_images(rootfolder, lines, db_name, db_backend, height, width, not gray,
                            encoded, encode_type, check_size)
    if skipped:
        LOG.warning(f"Skipped {skipped} of {len(lines)} images that could not be read.")
    return 0


def read_list_file(path):
    """[(filename, label)] from "filename label" lines, split at the last space."""
    try:
        text = read_input_text(path, "LISTFILE")
    except CaffeError as error:
        raise CaffeError(f"convert_imageset: {error}") from None
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.rstrip()
        if not line.strip():
            continue
        filename, space, label = line.rpartition(" ")
        try:
            if not space or not filename:
                raise ValueError
            lines.append((filename, int(label)))
        except ValueError:
            raise CaffeError(f"convert_imageset: {path}:{number}: expected 'FILENAME LABEL' "
                             f"with an integer label, got '{line}'") from None
    return lines


def _image_path(rootfolder, filename):
    if rootfolder and not rootfolder.endswith("/"):
        rootfolder += "/"
    return rootfolder + filename


def _write_images(rootfolder, lines, db_name, db_backend, height, width, is_color, encoded,
                  encode_type, check_size):
    """Store every readable image; return how many were skipped."""
    from pycaffe_cli.data.image_datum import DatumWriter
    data_size = None
    skipped = 0
    images = _datums(rootfolder, lines, height, width, is_color, encoded, encode_type)
    with DatumWriter(db_name, db_backend, tool="convert_imageset") as writer:
        for line_id, filename, path, datum in images:
            if datum is None:
                LOG.warning(f"Could not open or find file {path}")
                skipped += 1
                continue
            if check_size:
                data_size = checked_size(data_size, datum, "convert_imageset", path)
            writer.put(f"{line_id:08d}_{filename}", datum)
    return skipped


def checked_size(data_size, datum, tool, path):
    """--check_size as Caffe checks it: the first image sets the size (channels x height x
    width, ``data_size`` None until then), every later one's data field must have it.
    Returns the size to check the next image against."""
    if data_size is None:
        return datum.channels * datum.height * datum.width
    if len(datum.data) != data_size:
        raise CaffeError(f"{tool}: {path}: incorrect data field size {len(datum.data)} (the "
                         f"first image has {data_size}); resize the images "
                         "(--resize_height/--resize_width)")
    return data_size


def _datums(rootfolder, lines, height, width, is_color, encoded, encode_type):
    """(line index, filename, path, Datum or None) for every line, in the list's order. The
    images are read, decoded and resized on the compute threads (Pillow's decoders and the
    resize kernel release the GIL), a few ahead of the one being written, so the database's
    contents are those of reading them one by one."""
    from pycaffe_cli.data.image_datum import read_image_to_datum

    def read(line_id):
        filename, label = lines[line_id]
        encoding = encode_type or (_guess_encoding(filename) if encoded else "")
        path = _image_path(rootfolder, filename)
        return (line_id, filename, path,
                read_image_to_datum(path, label, height, width, is_color, encoding))
    return map_ahead(read, range(len(lines)), "convert_imageset")


def _guess_encoding(filename):
    """The file's extension with its dot (".png"), as Caffe guesses it; "png" if it has none
    (Caffe crashes there)."""
    dot = filename.rfind(".")
    if dot < 0:
        LOG.warning(f"Failed to guess the encoding of '{filename}'; encoding it as png")
        return "png"
    return filename[dot:].lower()


def shuffled(lines, shuffle, seed):
    """The list file's lines, in a random order with --shuffle (--seed makes it repeatable);
    logs their count as Caffe's tools do."""
    if shuffle:
        LOG.info("Shuffling data")
        if seed is not None:
            set_random_seed(seed)
        lines = [lines[i] for i in rng().permutation(len(lines))]
    LOG.info(f"A total of {len(lines)} images.")
    return lines


def checked_encoding(tool, encoded, encode_type, check_size):
    """Whether images are stored encoded (--encode_type implies --encoded), refusing an
    unknown type and --check_size with encoded images before any database is made."""
    if encode_type and not encoded:
        LOG.info("encode_type specified, assuming encoded=true.")
    if encode_type:
        from pycaffe_cli.data.image_datum import image_format
        image_format(encode_type)
    if (encoded or encode_type) and check_size:
        raise CaffeError(f"{tool}: --check_size cannot check encoded images (their sizes are "
                         "not known until decoded); drop one of the two flags")
    return encoded or bool(encode_type)
