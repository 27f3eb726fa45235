"""The SSD fork's data tools: ``pycaffe convert_annoset`` and ``pycaffe get_image_size``, and
the label map helpers (pycaffe_cli/detection/label_map.py) they use.

Reference values are worked out by hand from the fork's rules (tools/convert_annoset.cpp,
util/io.cpp): boxes divided by the size the annotation declares, grouped per label in order
of first appearance, instance ids counting within a group, the Datum's label -1.
"""
import io
import json
import os

import numpy as np
import pytest
from PIL import Image

from pycaffe_cli.detection import label_map as lm
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.proto import caffe_pb2
from tests.db_helpers import read_annotated

HEIGHT, WIDTH = 40, 60
LABEL_MAP = """item { name: "none_of_the_above" label: 0 display_name: "background" }
item { name: "cat" label: 1 display_name: "Cat" }
item { name: "dog" label: 2 display_name: "Dog" }
"""


def voc_xml(objects, size=(WIDTH, HEIGHT)):
    """VOC XML; objects are (name, difficult, (xmin, ymin, xmax, ymax)) or raw XML text."""
    parts = ["<annotation>"]
    if size:
        parts.append(f"<size><width>{size[0]}</width><height>{size[1]}</height></size>")
    for item in objects:
        if isinstance(item, str):
            parts.append(item)
            continue
        name, difficult, (x0, y0, x1, y1) = item
        parts.append(f"<object><name>{name}</name><difficult>{difficult}</difficult><bndbox>"
                     f"<xmin>{x0}</xmin><ymin>{y0}</ymin><xmax>{x1}</xmax><ymax>{y1}</ymax>"
                     "</bndbox></object>")
    return "\n".join(parts + ["</annotation>"])


class Set:
    """A folder of images and annotation files, with helpers for list files and DBs."""

    def __init__(self, folder):
        self.folder = folder
        self.root = f"{folder}/"
        self.rng = np.random.default_rng(5)

    def image(self, name, height=HEIGHT, width=WIDTH):
        pixels = self.rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(self.folder / name)
        return pixels

    def write(self, name, text):
        (self.folder / name).write_text(text)
        return str(self.folder / name)

    def db(self, name="db"):
        return str(self.folder / name)


@pytest.fixture
def files(tmp_path):
    folder = tmp_path / "set"
    folder.mkdir()
    files = Set(folder)
    files.write("labelmap.prototxt", LABEL_MAP)
    return files


def boxes(anno_datum):
    """{label: [(instance_id, xmin, ymin, xmax, ymax, difficult)]} in stored order."""
    return {group.group_label: [(a.instance_id, a.bbox.xmin, a.bbox.ymin, a.bbox.xmax,
                                 a.bbox.ymax, a.bbox.difficult) for a in group.annotation]
            for group in anno_datum.annotation_group}


def convert(run_cli, files, *flags, listing="list.txt", labels=True):
    label_flags = [f"--label_map_file={files.folder}/labelmap.prototxt"] if labels else []
    return run_cli("convert_annoset", "--anno_type=detection", *label_flags, *flags,
                   files.root, str(files.folder / listing), files.db())


def test_xml_boxes_are_grouped_normalized_and_keyed_as_the_fork_does(run_cli, files):
    pixels = files.image("a.png")
    files.image("b.png")
    files.write("a.xml", voc_xml([("cat", 1, (6, 4, 30, 20)), ("dog", 0, (0, 0, 60, 40)),
                                  ("cat", 0, (3, 2, 12, 10))]))
    files.write("b.xml", voc_xml([]))
    files.write("list.txt", "a.png a.xml\n\nb.png b.xml\n")
    result = convert(run_cli, files)
    assert result.code == 0, result.err
    [(key_a, a), (key_b, b)] = read_annotated(files.db())
    assert (key_a, key_b) == ("00000000_a.png", "00000001_b.png")
    assert a.type == caffe_pb2.AnnotatedDatum.BBOX and a.datum.label == -1
    assert (a.datum.channels, a.datum.height, a.datum.width, a.datum.encoded) == (3, 40, 60,
                                                                                  False)
    stored = np.frombuffer(a.datum.data, np.uint8).reshape(3, HEIGHT, WIDTH)
    np.testing.assert_array_equal(stored, pixels[:, :, ::-1].transpose(2, 0, 1))  # BGR
    f = np.float32
    assert boxes(a) == {
        1: [(0, f(6) / f(60), f(4) / f(40), f(30) / f(60), f(20) / f(40), True),
            (1, f(3) / f(60), f(2) / f(40), f(12) / f(60), f(10) / f(40), False)],
        2: [(0, 0.0, 0.0, 1.0, 1.0, False)]}
    assert [g.group_label for g in a.annotation_group] == [1, 2]
    assert b.type == caffe_pb2.AnnotatedDatum.BBOX and not b.annotation_group


def test_xml_quirks_declared_size_late_difficult_and_fractions(run_cli, files):
    files.image("a.png")
    # the boxes are divided by the size the file declares, which differs from the image's;
    # a <difficult> after the <bndbox> does not count, as in the fork
    late = ("<object><name>dog</name><bndbox><xmin>10</xmin><ymin>10</ymin><xmax>20.5</xmax>"
            "<ymax>30</ymax></bndbox><difficult>1</difficult></object>")
    files.write("a.xml", voc_xml([late], size=(100, 50)))
    files.write("list.txt", "a.png a.xml\n")
    result = convert(run_cli, files)
    assert result.code == 0, result.err
    assert any(line.endswith("a.xml inconsistent image height.") for line in result.messages)
    assert any(line.endswith("a.xml inconsistent image width.") for line in result.messages)
    [(_, a)] = read_annotated(files.db())
    f = np.float32
    assert boxes(a) == {2: [(0, f(10) / f(100), f(10) / f(50), f(20.5) / f(100), f(30) / f(50),
                             False)]}


def test_json_annotations_map_category_ids_and_iscrowd(run_cli, files):
    files.write("labelmap.prototxt", 'item { name: "0" label: 0 }\nitem { name: "7" label: 1 }\n'
                                     'item { name: "car" label: 2 }\n')
    files.image("a.png")
    files.write("a.json", json.dumps({
        "image": {"width": WIDTH, "height": HEIGHT},
        "annotation": [{"category_id": 7, "iscrowd": 1, "bbox": [6, 4, 24, 16]},
                       {"category_id": "car", "bbox": [0, 0, 30, 20]},
                       {"category_id": 7, "iscrowd": 0, "bbox": [1.5, 2, 3, 4]}]}))
    files.write("list.txt", "a.png a.json\n")
    result = convert(run_cli, files, "--label_type=json")
    assert result.code == 0, result.err
    [(_, a)] = read_annotated(files.db())
    f = np.float32
    assert boxes(a) == {
        1: [(0, f(6) / f(60), f(4) / f(40), f(30) / f(60), f(20) / f(40), True),
            (1, f(1.5) / f(60), f(2) / f(40), f(4.5) / f(60), f(6) / f(40), False)],
        2: [(0, 0.0, 0.0, f(30) / f(60), f(20) / f(40), False)]}


def test_txt_annotations_need_no_label_map(run_cli, files):
    files.image("a.png")
    files.write("a.txt", "2 6 4 30 20\n5 0 0 60 40\n2 3 2 12 10\n")
    files.write("list.txt", "a.png a.txt\n")
    result = convert(run_cli, files, "--label_type=txt", labels=False)
    assert result.code == 0, result.err
    [(_, a)] = read_annotated(files.db())
    f = np.float32
    assert boxes(a) == {
        2: [(0, f(6) / f(60), f(4) / f(40), f(30) / f(60), f(20) / f(40), False),
            (1, f(3) / f(60), f(2) / f(40), f(12) / f(60), f(10) / f(40), False)],
        5: [(0, 0.0, 0.0, 1.0, 1.0, False)]}


def test_classification_lines_store_the_label_and_no_boxes(run_cli, files):
    files.image("a.png")
    files.write("list.txt", "a.png 7\n")
    result = run_cli("convert_annoset", files.root, str(files.folder / "list.txt"), files.db())
    assert result.code == 0, result.err
    [(_, a)] = read_annotated(files.db())
    assert a.datum.label == 7 and not a.HasField("type") and not a.annotation_group


@pytest.mark.parametrize("flags, size", [
    (["--resize_height=20", "--resize_width=30"], (20, 30)),
    (["--min_dim=50"], (50, 75)),              # the smaller side scaled up to 50
    (["--max_dim=30"], (20, 30)),              # the larger side scaled down to 30
    (["--min_dim=50", "--max_dim=70"], (47, 70)),   # max_dim wins: 40 * 70/60 = 46.67
    (["--min_dim=30"], (40, 60)),              # already large enough: unchanged
])
def test_resizing_keeps_the_normalized_boxes(run_cli, files, flags, size):
    files.image("a.png")
    files.write("a.xml", voc_xml([("cat", 0, (6, 4, 30, 20))]))
    files.write("list.txt", "a.png a.xml\n")
    result = convert(run_cli, files, *flags)
    assert result.code == 0, result.err
    [(_, a)] = read_annotated(files.db())
    assert (a.datum.height, a.datum.width) == size
    assert len(a.datum.data) == 3 * size[0] * size[1]
    f = np.float32
    assert boxes(a) == {1: [(0, f(6) / f(60), f(4) / f(40), f(30) / f(60), f(20) / f(40),
                             False)]}


def decoded(datum):
    image = Image.open(io.BytesIO(datum.data))
    return image.format, np.asarray(image.convert("RGB"))


def test_encoded_images_keep_the_file_or_are_encoded_anew(run_cli, files):
    pixels = files.image("a.png")
    files.write("a.xml", voc_xml([("cat", 0, (6, 4, 30, 20))]))
    files.write("list.txt", "a.png a.xml\n")
    # --encode_type=png matches the file's extension: the file's own bytes, no sizes (fork)
    assert convert(run_cli, files, "--encode_type=png").code == 0
    [(_, a)] = read_annotated(files.db())
    assert a.datum.encoded and a.datum.data == (files.folder / "a.png").read_bytes()
    assert (a.datum.channels, a.datum.height, a.datum.width) == (0, 0, 0)
    assert boxes(a)[1][0][0] == 0
    # --encoded guesses ".png", which the fork's matchExt never matches: encoded anew, with
    # the sizes set; the pixels survive (PNG is lossless)
    os.rename(files.db(), files.db("db_png"))
    assert convert(run_cli, files, "--encoded").code == 0
    [(_, b)] = read_annotated(files.db())
    assert b.datum.encoded and (b.datum.channels, b.datum.height, b.datum.width) == (3, 40, 60)
    kind, rgb = decoded(b.datum)
    assert kind == "PNG"
    np.testing.assert_array_equal(rgb, pixels)
    # a resize is encoded anew as well
    os.rename(files.db(), files.db("db_guess"))
    assert convert(run_cli, files, "--encode_type=jpg", "--min_dim=50").code == 0
    [(_, c)] = read_annotated(files.db())
    kind, rgb = decoded(c.datum)
    assert kind == "JPEG" and rgb.shape == (50, 75, 3)


def test_shuffle_with_a_seed_is_repeatable(run_cli, files):
    names = [f"{i}.png" for i in range(6)]
    for name in names:
        files.image(name)
        files.write(name[:-4] + ".xml", voc_xml([("cat", 0, (1, 1, 5, 5))]))
    files.write("list.txt", "".join(f"{n} {n[:-4]}.xml\n" for n in names))
    keys = []
    for run in range(2):
        assert convert(run_cli, files, "--shuffle", "--seed=3").code == 0
        keys.append([key for key, _ in read_annotated(files.db())])
        os.rename(files.db(), files.db(f"db{run}"))
    assert keys[0] == keys[1]
    # the keys number the shuffled lines, as the fork's do: the names move, the numbers not
    assert [key.split("_", 1)[0] for key in keys[0]] == [f"{i:08d}" for i in range(6)]
    shuffled = [key.split("_", 1)[1] for key in keys[0]]
    assert sorted(shuffled) == names and shuffled != names


def test_an_unreadable_image_is_skipped_with_a_warning(run_cli, files):
    files.image("a.png")
    files.write("a.xml", voc_xml([]))
    files.write("list.txt", "missing.png a.xml\na.png a.xml\n")
    result = convert(run_cli, files)
    assert result.code == 0, result.err
    assert [key for key, _ in read_annotated(files.db())] == ["00000001_a.png"]
    assert any("Failed to read missing.png" in line for line in result.messages)


@pytest.mark.parametrize("setup, words", [
    (lambda f: f.write("list.txt", "a.png missing.xml\n"),
     ["annotation file", "missing.xml"]),
    (lambda f: f.write("a.xml", "<annotation><object>") and f.write("list.txt", "a.png a.xml\n"),
     ["a.xml", "not valid XML"]),
    (lambda f: f.write("a.xml", voc_xml([("bird", 0, (1, 1, 2, 2))]))
     and f.write("list.txt", "a.png a.xml\n"),
     ["a.xml", "unknown class name 'bird'"]),
    (lambda f: f.write("a.xml", voc_xml(["<object><name>cat</name><bndbox><xmin>1</xmin>"
                                         "</bndbox></object>"]))
     and f.write("list.txt", "a.png a.xml\n"),
     ["a.xml", "no <ymin>"]),
    (lambda f: f.write("a.xml", voc_xml(["<object><name>cat</name><bndbox><xmin>x</xmin>"
                                         "<ymin>1</ymin><xmax>2</xmax><ymax>2</ymax>"
                                         "</bndbox></object>"]))
     and f.write("list.txt", "a.png a.xml\n"),
     ["a.xml", "xmin 'x' is not a number"]),
    (lambda f: f.write("a.xml", voc_xml(["<object><name>cat</name></object>"]))
     and f.write("list.txt", "a.png a.xml\n"),
     ["a.xml", "object 1 has no <bndbox>"]),
    (lambda f: f.write("list.txt", "a.png\n"), ["list.txt:1", "IMAGE ANNOTATION"]),
    (lambda f: f.write("labelmap.prototxt", "item { nam: 'x' }\n")
     and f.write("list.txt", "a.png a.xml\n"), ["labelmap.prototxt:1", "nam"]),
    (lambda f: f.write("labelmap.prototxt", LABEL_MAP + 'item { name: "cat" label: 3 }\n')
     and f.write("a.xml", voc_xml([])) and f.write("list.txt", "a.png a.xml\n"),
     ["labelmap.prototxt", "name 'cat'"]),
], ids=["missing-annotation", "bad-xml", "unknown-name", "missing-corner", "bad-number",
        "no-bndbox", "bad-list-line", "bad-label-map", "duplicate-name"])
def test_user_errors_are_one_line_and_leave_no_database(run_cli, files, setup, words):
    files.image("a.png")
    setup(files)
    result = convert(run_cli, files, "--check_label")
    result.one_error(*words)
    assert [entry for entry in os.listdir(files.folder) if "db" in entry] == []


def test_missing_inputs_and_flags(run_cli, files, tmp_path):
    files.write("list.txt", "a.png a.xml\n")
    run_cli("convert_annoset", files.root, str(tmp_path / "nope.txt"),
            files.db()).one_error("nope.txt")
    convert(run_cli, files, labels=False).one_error("--label_map_file")
    convert(run_cli, files, "--label_map_file=" + str(tmp_path / "no.prototxt")).one_error(
        "no.prototxt")
    convert(run_cli, files, "--encoded", "--check_size").one_error("--check_size")
    assert convert(run_cli, files, "--min_dim=-1").code == 2
    assert not os.path.exists(files.db())


def test_without_check_label_the_last_duplicate_wins(run_cli, files):
    files.write("labelmap.prototxt", LABEL_MAP + 'item { name: "cat" label: 3 }\n')
    files.image("a.png")
    files.write("a.xml", voc_xml([("cat", 0, (1, 1, 2, 2))]))
    files.write("list.txt", "a.png a.xml\n")
    assert convert(run_cli, files).code == 0
    [(_, a)] = read_annotated(files.db())
    assert list(boxes(a)) == [3]


# --- get_image_size ------------------------------------------------------------------------
def test_get_image_size_writes_name_height_width(run_cli, files):
    files.image("a.png")
    files.image("b.png", 7, 9)
    files.write("list.txt", "a.png a.xml\nb.png b.xml\n")
    out = files.folder / "sizes.txt"
    result = run_cli("get_image_size", files.root, str(files.folder / "list.txt"), str(out))
    assert result.code == 0, result.err
    assert out.read_text() == "a 40 60\nb 7 9\n"
    files.write("ids.txt", "b 12\na 11\n")
    result = run_cli("get_image_size", f"--name_id_file={files.folder}/ids.txt", files.root,
                     str(files.folder / "list.txt"), str(out))
    assert result.code == 0, result.err
    assert out.read_text() == "11 40 60\n12 7 9\n"


def test_get_image_size_errors(run_cli, files):
    files.image("a.png")
    files.write("list.txt", "a.png a.xml\nmissing.png b.xml\n")
    out = files.folder / "sizes.txt"
    run_cli("get_image_size", files.root, str(files.folder / "list.txt"),
            str(out)).one_error("missing.png")
    assert not out.exists()
    files.write("list.txt", "a.png a.xml\n")
    files.write("ids.txt", "a 1\na 2\n")
    run_cli("get_image_size", f"--name_id_file={files.folder}/ids.txt", files.root,
            str(files.folder / "list.txt"), str(out)).one_error("ids.txt:2", "'a'")


# --- label maps ----------------------------------------------------------------------------
def label_map(*items):
    result = caffe_pb2.LabelMap()
    for name, label, display in items:
        result.item.add(name=name, label=label, display_name=display)
    return result


def test_label_map_dictionaries_and_their_duplicate_checks():
    plain = label_map(("bg", 0, "background"), ("cat", 1, "Cat"))
    assert lm.name_to_label(plain) == {"bg": 0, "cat": 1}
    assert lm.label_to_name(plain) == {0: "bg", 1: "cat"}
    assert lm.label_to_display_name(plain) == {0: "background", 1: "Cat"}
    twice = label_map(("cat", 1, "Cat"), ("kitty", 1, "Kitty"))
    with pytest.raises(CaffeError, match="several items with label 1"):
        lm.label_to_name(twice)
    with pytest.raises(CaffeError, match="my.prototxt: .*label 1"):
        lm.label_to_display_name(twice, where="my.prototxt")
    assert lm.label_to_name(twice, strict=False) == {1: "kitty"}
    with pytest.raises(CaffeError, match="name 'cat'"):
        lm.name_to_label(label_map(("cat", 1, ""), ("cat", 2, "")))


def test_read_label_map_names_file_and_line(tmp_path):
    path = tmp_path / "labels.prototxt"
    path.write_text(LABEL_MAP)
    assert [item.name for item in lm.read_label_map(str(path)).item] == ["none_of_the_above",
                                                                        "cat", "dog"]
    path.write_text(LABEL_MAP + "item { label: x }\n")
    with pytest.raises(CaffeError, match=r"labels.prototxt:4:"):
        lm.read_label_map(str(path))
    with pytest.raises(CaffeError, match="nope.prototxt"):
        lm.read_label_map(str(tmp_path / "nope.prototxt"))


def test_label_map_from_label_file(tmp_path):
    path = tmp_path / "labels.txt"
    path.write_text("cat\ndog\n")
    made = lm.label_map_from_label_file(str(path), include_background=True)
    assert [(i.name, i.label, i.display_name) for i in made.item] == [
        ("none_of_the_above", 0, "background"), ("cat", 1, "cat"), ("dog", 2, "dog")]
    path.write_text("n01 5 cat\nn02:9:dog\n")
    made = lm.label_map_from_label_file(str(path))
    assert [(i.name, i.label, i.display_name) for i in made.item] == [("n01", 5, "cat"),
                                                                       ("n02", 9, "dog")]
    path.write_text("cat 1\ndog\n")
    with pytest.raises(CaffeError, match="labels.txt:2"):
        lm.label_map_from_label_file(str(path))
