"""Caffe's data tools as pycaffe commands: convert_imageset and compute_image_mean."""
import io
import re

import numpy as np
import pytest
from PIL import Image

from pycaffe_cli.cli import normalize_argv
from pycaffe_cli.data import db
from pycaffe_cli.data.linear_resize import resize_linear
from pycaffe_cli.io.blob_proto import blob_proto_to_array
from pycaffe_cli.io.prototxt import read_blob_proto
from pycaffe_cli.proto import caffe_pb2
from tests.db_helpers import pixels, read_db



def png_gray(rgb):
    """What OpenCV's imread(IMREAD_GRAYSCALE) gives for a colour PNG: libpng's rgb_to_gray
    with OpenCV's 0.299 / 0.587 weights (15-bit fixed point, truncated)."""
    r, g, b = (rgb[..., i].astype(np.int64) for i in range(3))
    return ((r * 9797 + g * 19234 + b * 3737) >> 15).astype(np.uint8)


@pytest.fixture
def images(tmp_path):
    """Three 4x5 RGB PNGs in tmp_path/img and a list file naming them; returns a helper."""
    folder = tmp_path / "img"
    folder.mkdir()
    rng = np.random.default_rng(7)
    arrays = {}
    for name in ("a.png", "b.png", "c d.png"):
        arrays[name] = rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)
        Image.fromarray(arrays[name], "RGB").save(folder / name)

    class Images:
        root = str(folder) + "/"
        rgb = arrays

        @staticmethod
        def listfile(text, name="list.txt"):
            path = tmp_path / name
            path.write_text(text)
            return str(path)

        @staticmethod
        def db(name="out_lmdb"):
            return str(tmp_path / name)
    return Images


def convert(run_cli, images, *flags, listing="a.png 0\nb.png 1\nc d.png 2\n", name="out_lmdb"):
    return run_cli("convert_imageset", *flags, images.root, images.listfile(listing),
                   images.db(name))


# --- convert_imageset ----------------------------------------------------------------------
def test_keys_datum_fields_and_bgr_order(run_cli, images):
    result = convert(run_cli, images)
    assert result.code == 0, result.err
    assert "A total of 3 images." in result.messages
    assert "Processed 3 files." in result.messages
    items = read_db(images.db())
    assert [key for key, _ in items] == ["00000000_a.png", "00000001_b.png", "00000002_c d.png"]
    for (key, datum), label in zip(items, range(3)):
        name = key.split("_", 1)[1]
        assert (datum.channels, datum.height, datum.width, datum.label) == (3, 4, 5, label)
        assert datum.HasField("encoded") and not datum.encoded
        assert not datum.float_data
        # channel-major, BGR as OpenCV reads colour images
        bgr = images.rgb[name][:, :, ::-1]
        np.testing.assert_array_equal(pixels(datum), bgr.transpose(2, 0, 1))


def test_gray(run_cli, images):
    assert convert(run_cli, images, "-gray").code == 0
    for key, datum in read_db(images.db()):
        assert (datum.channels, datum.height, datum.width) == (1, 4, 5)
        np.testing.assert_array_equal(pixels(datum)[0], png_gray(images.rgb[key[9:]]))


def test_gray_png_in_colour_and_gray_mode(run_cli, images, tmp_path):
    gray = np.arange(20, dtype=np.uint8).reshape(4, 5) * 12
    Image.fromarray(gray, "L").save(tmp_path / "img" / "g.png")
    assert convert(run_cli, images, listing="g.png 4\n").code == 0
    [(_, datum)] = read_db(images.db())
    assert datum.channels == 3  # colour mode replicates gray, as IMREAD_COLOR does
    np.testing.assert_array_equal(pixels(datum), np.stack([gray] * 3))
    assert convert(run_cli, images, "--gray=true", listing="g.png 4\n", name="gray_lmdb").code == 0
    [(_, datum)] = read_db(images.db("gray_lmdb"))
    np.testing.assert_array_equal(pixels(datum), gray[None])


def test_resize(run_cli, images):
    result = convert(run_cli, images, "-resize_height=8", "--resize_width", "3")
    assert result.code == 0, result.err
    for key, datum in read_db(images.db()):
        assert (datum.channels, datum.height, datum.width) == (3, 8, 3)
        bgr = images.rgb[key[9:]][:, :, ::-1].transpose(2, 0, 1)
        np.testing.assert_array_equal(pixels(datum), resize_linear(bgr, 8, 3))


def test_only_one_resize_flag_keeps_sizes(run_cli, images):
    result = convert(run_cli, images, "--resize_height=8")
    assert result.code == 0
    assert any("resized only when both" in m for m in result.messages)
    assert {(d.height, d.width) for _, d in read_db(images.db())} == {(4, 5)}


def test_shuffle_is_repeatable_with_a_seed(run_cli, images):
    listing = "".join(f"{name} {i}\n" for i, name in enumerate(["a.png", "b.png", "c d.png"] * 3))
    orders = []
    for run in range(2):
        result = convert(run_cli, images, "-shuffle", "--seed=5", listing=listing,
                         name=f"shuffled{run}")
        assert result.code == 0, result.err
        assert "Shuffling data" in result.messages
        orders.append([(key, d.label) for key, d in read_db(images.db(f"shuffled{run}"))])
    assert orders[0] == orders[1]
    permutation = np.random.default_rng(5).permutation(9)
    names = (["a.png", "b.png", "c d.png"] * 3)
    assert orders[0] == [(f"{i:08d}_{names[j]}", j) for i, j in enumerate(permutation)]
    assert sorted(label for _, label in orders[0]) == list(range(9))


def test_encoded_keeps_the_file_bytes(run_cli, images, tmp_path):
    assert convert(run_cli, images, "--encoded").code == 0
    for key, datum in read_db(images.db()):
        assert datum.encoded and datum.data == (tmp_path / "img" / key[9:]).read_bytes()
        assert not datum.HasField("channels")  # Caffe leaves the sizes unset when encoded


def test_encode_type_reencodes(run_cli, images):
    result = convert(run_cli, images, "--encode_type=png", "-resize_height", "2",
                     "-resize_width", "2")
    assert result.code == 0, result.err
    assert "encode_type specified, assuming encoded=true." in result.messages
    for key, datum in read_db(images.db()):
        assert datum.encoded
        decoded = np.asarray(Image.open(io.BytesIO(datum.data)))
        bgr = images.rgb[key[9:]][:, :, ::-1].transpose(2, 0, 1)
        np.testing.assert_array_equal(decoded, resize_linear(bgr, 2, 2)[::-1].transpose(1, 2, 0))
    jpeg = convert(run_cli, images, "--encode_type", "jpg", name="jpeg_lmdb")
    assert jpeg.code == 0
    assert all(d.data[:2] == b"\xff\xd8" for _, d in read_db(images.db("jpeg_lmdb")))


def test_check_size(run_cli, images, tmp_path):
    Image.new("RGB", (7, 6)).save(tmp_path / "img" / "big.png")
    listing = "a.png 0\nbig.png 1\n"
    result = convert(run_cli, images, "--check_size", listing=listing)
    assert result.code == 1
    [line] = result.error_lines()
    assert "big.png: incorrect data field size 126 (the first image has 60)" in line
    resized = convert(run_cli, images, "--check_size", "-resize_height=3", "-resize_width=3",
                      listing=listing, name="resized")
    assert resized.code == 0, resized.err
    encoded = convert(run_cli, images, "--check_size", "--encoded", name="enc")
    assert encoded.code == 1 and "--check_size cannot check encoded" in encoded.err


def test_missing_image_is_skipped(run_cli, images):
    result = convert(run_cli, images, listing="a.png 0\nmissing.png 1\nb.png 2\n")
    assert result.code == 0, result.err
    assert f"Could not open or find file {images.root}missing.png" in result.messages
    assert "Skipped 1 of 3 images that could not be read." in result.messages
    assert "Processed 2 files." in result.messages
    assert [key for key, _ in read_db(images.db())] == ["00000000_a.png", "00000002_b.png"]


@pytest.mark.parametrize("listing, words", [
    ("a.png\n", ":1: expected 'FILENAME LABEL'"),
    ("a.png 0\n\nb.png one\n", ":3: expected 'FILENAME LABEL' with an integer label, got "
                               "'b.png one'"),
])
def test_bad_list_lines(run_cli, images, listing, words):
    result = convert(run_cli, images, listing=listing)
    assert result.code == 1
    [line] = result.error_lines()
    assert words in line


def test_user_errors(run_cli, images, tmp_path):
    missing = run_cli("convert_imageset", images.root, str(tmp_path / "nope.txt"), images.db())
    assert missing.code == 1 and "cannot read LISTFILE" in missing.err
    assert convert(run_cli, images).code == 0
    again = convert(run_cli, images)
    assert again.code == 1 and "already exists" in again.err
    backend = convert(run_cli, images, "--backend", "rocksdb", name="other")
    assert backend.code == 1 and 'unknown database backend "rocksdb"' in backend.err
    encoding = convert(run_cli, images, "--encode_type=xyz", name="other")
    assert encoding.code == 1 and 'unknown image encoding "xyz"' in encoding.err
    too_few = run_cli("convert_imageset", images.root)
    assert too_few.code == 2 and "Missing argument 'LISTFILE'" in too_few.err


# --- the command line ----------------------------------------------------------------------
@pytest.mark.parametrize("argv, expected", [
    (["convert_imageset", "-gray", "-resize_height=28", "r/", "l", "d"],
     ["convert_imageset", "--gray", "--resize_height=28", "r/", "l", "d"]),
    (["convert_imageset", "--gray=true", "--shuffle=false", "-check_size=1", "-encoded=no"],
     ["convert_imageset", "--gray", "--noshuffle", "--check_size", "--noencoded"]),
    (["convert_imageset", "-nogray", "--gray=maybe"],
     ["convert_imageset", "--nogray", "--gray=maybe"]),
    # the command word after tool flags; a positional that names a command stays put
    (["-backend", "lmdb", "compute_image_mean", "db"],
     ["compute_image_mean", "--backend", "lmdb", "db"]),
    (["convert_imageset", "train/", "train.txt", "train"],
     ["convert_imageset", "train/", "train.txt", "train"]),
])
def test_normalize_tool_flags(argv, expected):
    assert normalize_argv(argv) == expected


def test_tool_flags_belong_to_their_tool(run_cli):
    result = run_cli("train", "-gray")
    assert result.code == 2 and "No such option '--gray'" in result.err


def test_global_flags_are_accepted_by_tools(run_cli, images):
    result = convert(run_cli, images, "-solver", "s.prototxt")
    assert result.code == 0
    assert "--solver is not used by 'convert_imageset'; ignored" in result.messages


def test_usage_lists_the_tools(run_cli):
    result = run_cli("--help")
    assert "tools:" in result.out
    assert re.search(r"^  convert_imageset +convert a set of images to a leveldb/lmdb$",
                     result.out, re.M)
    assert re.search(r"^  compute_image_mean +compute the mean image of a leveldb/lmdb$",
                     result.out, re.M)
    help_text = run_cli("convert_imageset", "--help").out
    assert "ROOTFOLDER LISTFILE DB_NAME" in help_text and "--gray / --nogray" in help_text
    assert "--solver" not in help_text


# --- compute_image_mean ----------------------------------------------------------------------
def test_mean_of_raw_datums(run_cli, images, tmp_path):
    assert convert(run_cli, images).code == 0
    output = tmp_path / "mean.binaryproto"
    result = run_cli("compute_image_mean", "-backend", "lmdb", images.db(), output)
    assert result.code == 0, result.err
    stack = np.stack([images.rgb[name][:, :, ::-1].transpose(2, 0, 1)
                      for name in ("a.png", "b.png", "c d.png")]).astype(np.float64)
    expected = (stack.sum(axis=0) / 3).astype(np.float32)[None]
    proto = read_blob_proto(str(output))
    assert (proto.num, proto.channels, proto.height, proto.width) == (1, 3, 4, 5)
    assert not proto.shape.dim
    np.testing.assert_array_equal(blob_proto_to_array(proto), expected)
    assert "Processed 3 files." in result.messages
    assert f"Write to {output}" in result.messages
    assert "Number of channels: 3" in result.messages
    for c in range(3):
        value = float(np.float32(expected[0, c].astype(np.float64).mean()))
        assert f"mean_value channel [{c}]:{value:g}" in result.messages


def test_mean_of_encoded_datums_and_without_output(run_cli, images):
    assert convert(run_cli, images, "--encoded").code == 0
    assert convert(run_cli, images, name="raw").code == 0
    encoded = run_cli("compute_image_mean", images.db())
    raw = run_cli("compute_image_mean", images.db("raw"))
    assert encoded.code == 0 and "Decoding Datum" in encoded.messages
    assert not any(m.startswith("Write to") for m in encoded.messages)
    channel_lines = [m for m in raw.messages if m.startswith("mean_value")]
    assert len(channel_lines) == 3
    assert channel_lines == [m for m in encoded.messages if m.startswith("mean_value")]


def write_datums(path, datums):
    database = db.open_db(str(path), mode="new")
    txn = database.transaction()
    for i, datum in enumerate(datums):
        txn.put(f"{i:08d}", datum.SerializeToString())
    txn.commit()
    database.close()


def test_mean_of_float_datums(run_cli, tmp_path):
    values = np.array([[0.5, -1.0, 2.25, 3.0], [1.5, 1.0, 0.25, -3.0]], np.float32)
    datums = []
    for row in values:
        datum = caffe_pb2.Datum(channels=2, height=1, width=2)
        datum.float_data.extend(row.tolist())
        datums.append(datum)
    write_datums(tmp_path / "floats", datums)
    result = run_cli("compute_image_mean", tmp_path / "floats", tmp_path / "m.binaryproto")
    assert result.code == 0, result.err
    mean = blob_proto_to_array(read_blob_proto(str(tmp_path / "m.binaryproto")))
    np.testing.assert_array_equal(mean, [[[[1.0, 0.0]], [[1.25, 0.0]]]])
    assert "mean_value channel [0]:0.5" in result.messages
    assert "mean_value channel [1]:0.625" in result.messages


def test_mean_errors(run_cli, tmp_path):
    write_datums(tmp_path / "mixed", [caffe_pb2.Datum(channels=1, height=2, width=2,
                                                      data=bytes(4)),
                                      caffe_pb2.Datum(channels=1, height=2, width=2,
                                                      data=bytes(6))])
    mixed = run_cli("compute_image_mean", tmp_path / "mixed")
    assert mixed.code == 1
    assert "Datum '00000001' has 6 values; the first has 4 (1x2x2)" in mixed.err
    write_datums(tmp_path / "empty", [])
    empty = run_cli("compute_image_mean", tmp_path / "empty")
    assert empty.code == 1 and "holds no Datums" in empty.err
    missing = run_cli("compute_image_mean", tmp_path / "missing")
    assert missing.code == 1 and "no such database folder" in missing.err
    too_many = run_cli("compute_image_mean", "a", "b", "c")
    assert too_many.code == 2
