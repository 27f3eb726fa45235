"""The dataset scripts: MNIST and CIFAR-10 converters, and the local digits generator."""
import gzip

import numpy as np
import pytest

from pycaffe_cli.io.blob_proto import blob_proto_to_array
from pycaffe_cli.io.prototxt import read_blob_proto
from tests.db_helpers import pixels, read_db
from tests.scripts.loading import load_script


convert_mnist = load_script("convert_mnist")
convert_cifar10 = load_script("convert_cifar10")
make_digits = load_script("make_digits")


def idx_bytes(magic, array):
    return np.array([magic, *array.shape], ">u4").tobytes() + array.astype(np.uint8).tobytes()


# --- MNIST ----------------------------------------------------------------------------------
@pytest.fixture
def mnist(tmp_path):
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (3, 4, 5), dtype=np.uint8)
    labels = np.array([3, 0, 9], np.uint8)
    (tmp_path / "images").write_bytes(idx_bytes(2051, images))
    (tmp_path / "labels").write_bytes(idx_bytes(2049, labels))
    (tmp_path / "images.gz").write_bytes(gzip.compress(idx_bytes(2051, images)))
    return tmp_path, images, labels


@pytest.mark.parametrize("image_file", ["images", "images.gz"])
def test_mnist_round_trip(mnist, capsys, image_file):
    folder, images, labels = mnist
    code = convert_mnist.main([str(folder / image_file), str(folder / "labels"),
                               str(folder / "out")])
    assert code == 0
    items = read_db(folder / "out")
    assert [key for key, _ in items] == ["00000000", "00000001", "00000002"]
    for (_, datum), image, label in zip(items, images, labels):
        assert (datum.channels, datum.height, datum.width, datum.label) == (1, 4, 5, label)
        np.testing.assert_array_equal(pixels(datum)[0], image)
    err = capsys.readouterr().err
    assert "A total of 3 items." in err and "Rows: 4 Cols: 5" in err
    assert "Processed 3 files." in err


@pytest.mark.parametrize("images, labels, message", [
    ((2049, (1, 2, 2)), (2049, (1,)), "Incorrect image file magic. "),
    ((2051, (1, 2, 2)), (2051, (1,)), "Incorrect label file magic. "),
    ((2051, (2, 2, 2)), (2049, (3,)), "has 2 images but"),
])
def test_mnist_bad_files(tmp_path, capsys, images, labels, message):
    (tmp_path / "i").write_bytes(idx_bytes(images[0], np.zeros(images[1])))
    (tmp_path / "l").write_bytes(idx_bytes(labels[0], np.zeros(labels[1])))
    assert convert_mnist.main([str(tmp_path / "i"), str(tmp_path / "l"),
                               str(tmp_path / "out")]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("convert_mnist.py: error: ") and message in line


def test_mnist_truncated_and_missing(mnist, capsys):
    folder, _, _ = mnist
    (folder / "short").write_bytes((folder / "images").read_bytes()[:-1])
    assert convert_mnist.main([str(folder / "short"), str(folder / "labels"),
                               str(folder / "out")]) == 1
    assert "holds 59 pixel bytes; 3 images of 4x5 need 60" in capsys.readouterr().err
    assert convert_mnist.main([str(folder / "nope"), str(folder / "labels"),
                               str(folder / "out")]) == 1
    assert "Unable to open file" in capsys.readouterr().err


# --- CIFAR-10 -------------------------------------------------------------------------------
def cifar_records(rng, count):
    labels = rng.integers(0, 10, count, dtype=np.uint8)
    images = rng.integers(0, 256, (count, 3072), dtype=np.uint8)
    return labels, images, np.concatenate([labels[:, None], images], axis=1).tobytes()


def test_cifar_round_trip_and_mean(tmp_path, capsys):
    rng = np.random.default_rng(5)
    source = tmp_path / "cifar"
    source.mkdir()
    train_labels, train_images = [], []
    for number in range(1, 6):
        labels, images, raw = cifar_records(rng, 2)
        (source / f"data_batch_{number}.bin").write_bytes(raw)
        train_labels.append(labels)
        train_images.append(images)
    test_labels, test_images, raw = cifar_records(rng, 3)
    (source / "test_batch.bin").write_bytes(raw)
    assert convert_cifar10.main([str(source), str(tmp_path / "out"), "--mean"]) == 0
    train = read_db(tmp_path / "out" / "cifar10_train_lmdb")
    test = read_db(tmp_path / "out" / "cifar10_test_lmdb")
    assert [key for key, _ in train] == [f"{i:05d}" for i in range(10)]
    assert [key for key, _ in test] == ["00000", "00001", "00002"]
    for items, labels, images in ((train, np.concatenate(train_labels),
                                   np.concatenate(train_images)),
                                  (test, test_labels, test_images)):
        for (_, datum), label, image in zip(items, labels, images):
            assert (datum.channels, datum.height, datum.width, datum.label) == (3, 32, 32,
                                                                                label)
            np.testing.assert_array_equal(pixels(datum).reshape(-1), image)
    mean = blob_proto_to_array(read_blob_proto(str(tmp_path / "out" / "mean.binaryproto")))
    expected = np.concatenate(train_images).astype(np.float64).mean(axis=0)
    np.testing.assert_array_equal(mean, expected.astype(np.float32).reshape(1, 3, 32, 32))
    err = capsys.readouterr().err
    for line in ("Writing Training data", "Training Batch 5", "Writing Testing data"):
        assert line in err


def test_cifar_errors(tmp_path, capsys):
    source = tmp_path / "cifar"
    source.mkdir()
    rng = np.random.default_rng(0)
    for number in range(1, 6):
        (source / f"data_batch_{number}.bin").write_bytes(cifar_records(rng, 1)[2])
    assert convert_cifar10.main([str(source), str(tmp_path / "out")]) == 1
    assert "test_batch.bin: no such file" in capsys.readouterr().err
    (source / "test_batch.bin").write_bytes(b"\0" * 3000)
    assert convert_cifar10.main([str(source), str(tmp_path / "out2")]) == 1
    assert "3000 bytes is not a whole number of 3073-byte" in capsys.readouterr().err


# --- make_digits ----------------------------------------------------------------------------
def digits(folder, *flags):
    assert make_digits.main(["--out", str(folder), "--train", "500", "--test", "100",
                             *flags]) == 0
    return {split: read_db(folder / f"digits_{split}_lmdb") for split in ("train", "test")}


def as_arrays(items):
    images = np.stack([pixels(datum)[0] for _, datum in items])
    return images, np.array([datum.label for _, datum in items])


def test_make_digits(tmp_path, capsys):
    first = digits(tmp_path / "a", "--seed", "3", "--idx")
    again = digits(tmp_path / "b", "--seed", "3")
    other = digits(tmp_path / "c", "--seed", "4")
    for split, count in (("train", 500), ("test", 100)):
        items = first[split]
        assert [key for key, _ in items] == [f"{i:08d}" for i in range(count)]
        assert {(d.channels, d.height, d.width, len(d.data)) for _, d in items} == {
            (1, 28, 28, 784)}
        images, labels = as_arrays(items)
        np.testing.assert_array_equal(np.bincount(labels, minlength=10), [count // 10] * 10)
        # white digits on black: dark borders, bright strokes
        assert images[:, :2].mean() < 20 and images.max() == 255
        assert [d.SerializeToString() for _, d in items] == [
            d.SerializeToString() for _, d in again[split]]
    assert first["train"][0][1].data != other["train"][0][1].data
    # nearest class mean on 500 training digits is far above chance (0.1), and far from
    # perfect: the classes are learnable but not trivial
    train, train_labels = as_arrays(first["train"])
    test, test_labels = as_arrays(first["test"])
    means = np.stack([train[train_labels == c].mean(axis=0) for c in range(10)])
    distances = ((test[:, None].astype(np.float64) - means[None]) ** 2).sum(axis=(2, 3))
    accuracy = (distances.argmin(axis=1) == test_labels).mean()
    assert 0.35 < accuracy < 0.9
    # the IDX files convert back to the same database with the MNIST converter
    out = tmp_path / "a"
    assert convert_mnist.main([str(out / "t10k-images-idx3-ubyte"),
                               str(out / "t10k-labels-idx1-ubyte"), str(out / "mnist")]) == 0
    assert [(k, d.SerializeToString()) for k, d in read_db(out / "mnist")] == [
        (k, d.SerializeToString()) for k, d in first["test"]]


def test_make_digits_refuses_existing_databases(tmp_path, capsys):
    digits(tmp_path)
    assert make_digits.main(["--out", str(tmp_path), "--train", "10", "--test", "10"]) == 1
    assert "already exists" in capsys.readouterr().err
