"""scripts/make_shapes.py: the generated detection data set (images, VOC XML, lists, label
map, and the AnnotatedDatum LMDBs convert_annoset makes of them)."""
import xml.etree.ElementTree as ElementTree

import numpy as np
import pytest
from PIL import Image

from pycaffe_cli.detection.label_map import name_to_label, read_label_map
from tests.db_helpers import read_annotated
from tests.scripts.loading import load_script

make_shapes = load_script("make_shapes")


def generate(out, *flags):
    assert make_shapes.main(["--out", str(out), "--train", "6", "--test", "3", *flags]) == 0


def annotation(path):
    root = ElementTree.parse(path).getroot()
    size = (int(root.findtext("size/height")), int(root.findtext("size/width")))
    objects = [(item.findtext("name"),
                tuple(int(item.findtext(f"bndbox/{k}")) for k in ("xmin", "ymin", "xmax", "ymax")))
               for item in root.findall("object")]
    return size, objects


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    out = tmp_path_factory.mktemp("shapes")
    generate(out)
    return out


def test_lists_images_and_annotations_agree(shapes):
    lines = {name: (shapes / f"{name}.txt").read_text().splitlines()
             for name in ("trainval", "test")}
    assert [len(lines["trainval"]), len(lines["test"])] == [6, 3]
    for line in lines["trainval"] + lines["test"]:
        image_path, xml_path = line.split()
        image = np.asarray(Image.open(shapes / image_path))
        assert image.shape == (64, 64, 3) and image.dtype == np.uint8
        size, objects = annotation(shapes / xml_path)
        assert size == (64, 64)
        assert 1 <= len(objects) <= 3
        for index, (name, (xmin, ymin, xmax, ymax)) in enumerate(objects):
            assert name in make_shapes.CLASSES
            assert 0 <= xmin < xmax <= 64 and 0 <= ymin < ymax <= 64
            assert xmax - xmin >= 64 / 6 - 2 and ymax - ymin >= 64 / 6 - 2
            for _, other in objects[index + 1:]:
                assert make_shapes.iou((xmin, ymin, xmax, ymax), other) == 0
    assert (shapes / "test_name_size.txt").read_text().splitlines()[0] == "000006 64 64"


def test_each_shape_lies_inside_its_box():
    """The pixels the shapes change stay within their boxes. The texture is the first thing
    make_image draws from its random source, so the same seed gives it alone; a shape's colour
    is at least MIN_COLOUR_DISTANCE from the texture's mean, far beyond its noise, so pixels
    that moved by more than a third of that belong to a shape (or its anti-aliased edge)."""
    for seed in range(15):
        background, _ = make_shapes.texture(np.random.default_rng(seed), 64)
        background = np.clip(np.rint(background), 0, 255)
        image, objects = make_shapes.make_image(np.random.default_rng(seed), 64)
        changed = np.abs(image - background).max(axis=2) > make_shapes.MIN_COLOUR_DISTANCE / 3
        inside = np.zeros_like(changed)
        for kind, (xmin, ymin, xmax, ymax) in objects:
            assert kind in make_shapes.CLASSES
            assert 0 <= xmin < xmax <= 64 and 0 <= ymin < ymax <= 64
            assert changed[ymin:ymax, xmin:xmax].mean() > 0.3   # the shape is there
            inside[ymin:ymax, xmin:xmax] = True
        assert not np.any(changed & ~inside)


def test_label_map_and_databases(shapes):
    names = name_to_label(read_label_map(str(shapes / "labelmap.prototxt")))
    assert names == {"none_of_the_above": 0, "circle": 1, "square": 2, "triangle": 3}
    items = read_annotated(shapes / "shapes_trainval_lmdb")
    assert [key for key, _ in items] == [f"{i:08d}_Images/{i:06d}.png" for i in range(6)]
    for index, (_, item) in enumerate(items):
        assert (item.datum.channels, item.datum.height, item.datum.width) == (3, 64, 64)
        _, objects = annotation(shapes / "Annotations" / f"{index:06d}.xml")
        stored = sorted((group.group_label, a.bbox.xmin, a.bbox.ymin, a.bbox.xmax, a.bbox.ymax)
                        for group in item.annotation_group for a in group.annotation)
        expected = sorted((names[name], *(np.float32(v) / np.float32(64) for v in box))
                          for name, box in objects)
        assert stored == expected
    assert len(read_annotated(shapes / "shapes_test_lmdb")) == 3


def test_same_seed_same_bytes_other_seed_other_images(shapes, tmp_path):
    generate(tmp_path / "again", "--no-db")
    for name in ("Images/000004.png", "Annotations/000004.xml", "Annotations/000007.xml",
                 "trainval.txt", "labelmap.prototxt"):
        assert (tmp_path / "again" / name).read_bytes() == (shapes / name).read_bytes()
    assert not (tmp_path / "again" / "shapes_trainval_lmdb").exists()
    generate(tmp_path / "other", "--no-db", "--seed", "2")
    assert ((tmp_path / "other" / "Images/000000.png").read_bytes()
            != (shapes / "Images/000000.png").read_bytes())


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(SystemExit):
        make_shapes.main(["--out", str(tmp_path), "--train", "0"])
    with pytest.raises(SystemExit):
        make_shapes.main(["--out", str(tmp_path), "--size", "8"])
