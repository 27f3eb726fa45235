"""``pycaffe get_image_size``: the SSD fork's tools/get_image_size (weiliu89/caffe branch ssd):
``name height width`` lines for a list of images."""
import io
import os

from pycaffe_cli.commands import subcommand
from pycaffe_cli.commands.convert_annoset import numbered_pairs, read_pairs
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.input_files import IMAGE_LIMIT, read_input_bytes
from pycaffe_cli.log import LOG


@subcommand("get_image_size", flags=(), summary="write the sizes of a set of images",
            arguments=("ROOTFOLDER", "LISTFILE", "OUTFILE"),
            own_flags={"name_id_file": dict(default="", metavar="FILE",
                                            help="A file which maps image_name to image_id.")})
def get_image_size(rootfolder, listfile, outfile, name_id_file):
    """Get sizes of a set of images (the SSD fork's tools/get_image_size).

    LISTFILE has "img/1.jpg anno/1.xml" lines (the second field is not used); OUTFILE gets
    one "NAME HEIGHT WIDTH" line per image, NAME being the file name without its extension,
    or the image's id from --name_id_file ("NAME ID" lines). An image that cannot be read is
    an error (the fork writes an undefined size).
    """
    from pycaffe_cli.io.files import atomic_write
    tool = "get_image_size"
    lines = read_pairs(listfile, integer_second=False, tool=tool)
    LOG.info(f"A total of {len(lines)} images.")
    ids = _read_name_ids(name_id_file, len(lines), tool) if name_id_file else None
    rows = []
    for count, (filename, _) in enumerate(lines, 1):
        path = os.path.join(rootfolder, filename)
        height, width = _image_size(path, tool)
        name = os.path.splitext(os.path.basename(path))[0]
        if ids is not None:
            if name not in ids:
                raise CaffeError(f"{tool}: {name_id_file} has no id for the image '{name}'")
            name = ids[name]
        rows.append(f"{name} {height} {width}\n")
        if count % 1000 == 0:
            LOG.info(f"Processed {count} files.")
    if len(lines) % 1000:
        LOG.info(f"Processed {len(lines)} files.")
    with atomic_write(outfile, "w") as stream:
        stream.writelines(rows)
    return 0


def _read_name_ids(path, count, tool):
    ids = {}
    for number, name, value in numbered_pairs(path, "name_id_file", True,
                                              "NAME ID' with an integer id", tool):
        if name in ids:
            raise CaffeError(f"{tool}: {path}:{number}: the name '{name}' appears twice")
        ids[name] = value
    if len(ids) != count:
        raise CaffeError(f"{tool}: {path} has {len(ids)} names for {count} images; it must "
                         "name each image once")
    return ids


def _image_size(path, tool):
    """(height, width) of the image file as OpenCV reads it (EXIF orientation applied)."""
    from PIL import Image, UnidentifiedImageError
    try:
        data = read_input_bytes(path, "image file", IMAGE_LIMIT)
    except CaffeError as error:
        raise CaffeError(f"{tool}: {error}") from None
    try:
        image = Image.open(io.BytesIO(data))
        width, height = image.size
        orientation = image.getexif().get(0x0112, 1)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:
        raise CaffeError(f"{tool}: could not decode image file '{path}': {error}") from None
    if orientation in (5, 6, 7, 8):   # rotated by 90 degrees
        height, width = width, height
    return height, width
