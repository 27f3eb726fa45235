"""The Python interface refuses impossible arguments with an exception naming them: file
readers refuse what the command line refuses (pipes, devices, folders) without opening them,
caffe.io's size arguments must be sizes, and a blob's dimensions must be integers >= 0."""
import builtins
import os
import signal

import numpy as np
import pytest

import caffe
from caffe import io as caffe_io
from pycaffe_cli.errors import CaffeError

NET = """
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y"
        inner_product_param { num_output: 2 } }
"""
IMAGE = np.linspace(0, 1, 5 * 6 * 3, dtype=np.float32).reshape(5, 6, 3)


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A FIFO, a folder and a net in tmp_path, a 10 s alarm (a reader that opens the FIFO
    blocks), and the list of paths opened through os.open or open()."""
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    (tmp_path / "folder.png").mkdir()
    (tmp_path / "net.prototxt").write_text(NET)
    opened = []
    real_os_open, real_open = os.open, builtins.open

    def spy_os_open(path, *args, **kwargs):
        opened.append(os.fspath(path))
        return real_os_open(path, *args, **kwargs)

    def spy_open(path, *args, **kwargs):
        if isinstance(path, (str, bytes, os.PathLike)):
            opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(os, "open", spy_os_open)
    monkeypatch.setattr(builtins, "open", spy_open)

    def hang(signum, frame):
        raise RuntimeError("the reader blocked on the FIFO")
    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(10)
    yield tmp_path, opened
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


FILE_CASES = {  # name: (path under tmp_path or absolute, call, exception, message)
    "load_image of a FIFO": ("pipe.png", caffe_io.load_image, OSError,
                             r"cannot read image file '.*pipe\.png': Is a named pipe \(FIFO\), "
                             "not a regular file"),
    "load_image of a folder": ("folder.png", caffe_io.load_image, OSError,
                               "folder.png': Is a directory, not a regular file"),
    "load_image of /dev/zero": ("/dev/zero", caffe_io.load_image, OSError,
                                "'/dev/zero': Is a character device, not a regular file"),
    "load_image, grey, of a FIFO": ("pipe.png", lambda p: caffe_io.load_image(p, False), OSError,
                                    r"pipe\.png': Is a named pipe"),
    "load_image of a NUL path": ("a\0b.png", caffe_io.load_image, ValueError,
                                 "the path contains a NUL byte"),
    "Net of a FIFO": ("pipe.png", lambda p: caffe.Net(p, caffe.TEST), CaffeError,
                      r"cannot read net file '.*pipe\.png': Is a named pipe"),
    "Net weights of a FIFO": ("pipe.png", "weights", CaffeError,
                              r"cannot read weights file '.*pipe\.png': Is a named pipe"),
    "get_solver of a folder": ("folder.png", caffe.get_solver, CaffeError,
                               "cannot read solver file .*folder.png': Is a directory"),
}


@pytest.mark.parametrize("case", sorted(FILE_CASES))
def test_file_readers_refuse_what_the_command_line_refuses(files, case):
    folder, opened = files
    name, call, error, message = FILE_CASES[case]
    path = name if name.startswith("/") else str(folder / name)
    if call == "weights":
        def call(p):
            return caffe.Net(str(folder / "net.prototxt"), caffe.TEST, weights=p)
    with pytest.raises(error, match=message):
        call(path)
    assert path not in opened


def test_load_image_still_reads_files_and_file_objects(tmp_path):
    from PIL import Image
    Image.fromarray(np.full((2, 3, 3), 255, np.uint8)).save(tmp_path / "white.png")
    assert caffe_io.load_image(str(tmp_path / "white.png")).shape == (2, 3, 3)
    with open(tmp_path / "white.png", "rb") as stream:
        assert caffe_io.load_image(stream, color=False).shape == (2, 3, 1)
    with pytest.raises(FileNotFoundError, match="nothing.png"):
        caffe_io.load_image(tmp_path / "nothing.png")


def transformer():
    return caffe_io.Transformer({"data": (1, 3, 4, 4)})


ARGUMENT_CASES = {  # name: (call, exception, message)
    "resize_image to (0, 0)": (lambda: caffe_io.resize_image(IMAGE, (0, 0)), ValueError,
                               r"new_dims must be \(height, width\), two integers > 0, got "
                               r"\(0, 0\)"),
    "resize_image to a negative height": (lambda: caffe_io.resize_image(IMAGE, (-2, 4)),
                                          ValueError, r"new_dims .* got \(-2, 4\)"),
    "resize_image to three sizes": (lambda: caffe_io.resize_image(IMAGE, (2, 3, 3)),
                                    ValueError, r"new_dims .* got \(2, 3, 3\)"),
    "resize_image to one size": (lambda: caffe_io.resize_image(IMAGE, 4), ValueError,
                                 "new_dims .* got 4"),
    "resize_image to 1.5 rows": (lambda: caffe_io.resize_image(IMAGE, (1.5, 3)), ValueError,
                                 r"new_dims .* got \(1.5, 3\)"),
    "resize_image to NaN rows": (lambda: caffe_io.resize_image(IMAGE, (np.nan, 3)),
                                 ValueError, r"new_dims .* got \(nan, 3\)"),
    "resize_image to True rows": (lambda: caffe_io.resize_image(IMAGE, (True, 3)), ValueError,
                                  r"new_dims .* got \(True, 3\)"),
    "resize_image to strings": (lambda: caffe_io.resize_image(IMAGE, ("4", "4")), ValueError,
                                r"new_dims .* got \('4', '4'\)"),
    "resize_image of an empty image": (
        lambda: caffe_io.resize_image(np.zeros((0, 4, 3)), (2, 2)), ValueError,
        r"im must be an \(H, W, K\) image of at least 1x1 pixels, got an array of shape "
        r"\(0, 4, 3\)"),
    "resize_image of a row": (lambda: caffe_io.resize_image(np.zeros(3), (2, 2)), ValueError,
                              r"im must be .* shape \(3,\)"),
    "oversample to (0, 0)": (lambda: caffe_io.oversample([IMAGE], (0, 0)), ValueError,
                             r"crop_dims must be \(height, width\), two integers > 0"),
    "oversample to -1 columns": (lambda: caffe_io.oversample([IMAGE], (2, -1)), ValueError,
                                 r"crop_dims .* got \(2, -1\)"),
    "oversample to three sizes": (lambda: caffe_io.oversample([IMAGE], (2, 2, 3)), ValueError,
                                  r"crop_dims .* got \(2, 2, 3\)"),
    "oversample of no images": (lambda: caffe_io.oversample([], (2, 2)), ValueError,
                                "at least one image"),
    "oversample of two shapes": (lambda: caffe_io.oversample([IMAGE, IMAGE[:4]], (2, 2)),
                                 ValueError, r"image 1 is \(4, 6, 3\), image 0 \(5, 6, 3\)"),
    "oversample of grey 2-d images": (lambda: caffe_io.oversample([IMAGE[:, :, 0]], (2, 2)),
                                      ValueError, r"\(H, W, K\) images, got image 0 of shape "
                                                  r"\(5, 6\)"),
    "Transformer of a list": (lambda: caffe_io.Transformer(["data"]), TypeError,
                              "inputs must be a dict"),
    "Transformer of a 2.5-row input": (lambda: caffe_io.Transformer({"data": (1, 3, 2.5, 4)}),
                                       ValueError, r"input 'data' has shape \(1, 3, 2.5, 4\)"),
    "Transformer of a negative input": (lambda: caffe_io.Transformer({"data": (1, -3, 4, 4)}),
                                        ValueError, "input 'data' has shape"),
    "preprocess into a 0-row input": (
        lambda: caffe_io.Transformer({"data": (1, 3, 0, 4)}).preprocess("data", IMAGE),
        ValueError, r"input 'data': its shape \(1, 3, 0, 4\) is not \(N, K, H, W\)"),
    "preprocess a 2-d image": (lambda: transformer().preprocess("data", IMAGE[:, :, 0]),
                               ValueError, r"data must be an \(H, W, K\) image"),
    "preprocess an empty image": (lambda: transformer().preprocess("data", IMAGE[:0]),
                                  ValueError, r"got an array of shape \(0, 6, 3\)"),
    "set_transpose repeating an axis": (lambda: transformer().set_transpose("data", (0, 0, 1)),
                                        ValueError, "each axis must appear once"),
    "set_transpose past the axes": (lambda: transformer().set_transpose("data", (3, 0, 1)),
                                    ValueError, "an integer from 0 to 2"),
    "set_transpose of 1.5": (lambda: transformer().set_transpose("data", (1.5, 0, 1)),
                             ValueError, "an integer from 0 to 2"),
    "set_channel_swap past the channels": (
        lambda: transformer().set_channel_swap("data", (2, 1, 3)), ValueError,
        r"channel swap \(2, 1, 3\) for input 'data': each entry must be an integer from 0 "
        "to 2"),
    "set_channel_swap of -1": (lambda: transformer().set_channel_swap("data", (-1, 1, 0)),
                               ValueError, "an integer from 0 to 2"),
    "set_raw_scale of NaN": (lambda: transformer().set_raw_scale("data", float("nan")),
                             ValueError, "raw scale for input 'data' must be a finite number"),
    "set_raw_scale of a string": (lambda: transformer().set_raw_scale("data", "255"),
                                  TypeError, "raw scale for input 'data' must be a number"),
    "set_input_scale of inf": (lambda: transformer().set_input_scale("data", np.inf),
                               ValueError, "input scale for input 'data' must be a finite"),
    "load_image of a number": (lambda: caffe_io.load_image(3), TypeError,
                               "filename must be a path or a binary file object, got int"),
    "load_image with color 'no'": (lambda: caffe_io.load_image("x.png", color="no"),
                                   TypeError, "color must be True or False, got 'no'"),
}


@pytest.mark.parametrize("case", sorted(ARGUMENT_CASES))
def test_io_arguments_must_be_possible(case):
    call, error, message = ARGUMENT_CASES[case]
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("call, shape", [
    (lambda: caffe_io.resize_image(IMAGE, (227.0, np.int64(3))), (227, 3, 3)),
    (lambda: caffe_io.resize_image(IMAGE, np.array([1, 1])), (1, 1, 3)),
    (lambda: caffe_io.oversample(np.stack([IMAGE, IMAGE]), np.array([5, 6])), (20, 5, 6, 3)),
    (lambda: caffe_io.oversample([IMAGE], (1, 1)), (10, 1, 1, 3)),
])
def test_borderline_sizes_are_still_accepted(call, shape):
    assert call().shape == shape


def test_borderline_transformer_settings_are_still_accepted():
    t = transformer()
    t.set_transpose("data", np.array([2, 0, 1]))
    t.set_channel_swap("data", (2, 1, 0))
    t.set_channel_swap("data", [0, 0, 0])   # grey from the first channel: allowed, as BVLC
    t.set_raw_scale("data", np.float32(255))
    t.set_input_scale("data", 0)
    t.set_mean("data", np.zeros(3))
    assert t.preprocess("data", IMAGE).shape == (3, 4, 4)


BLOB_CASES = {  # name: (dims, exception, message)
    "1.5": ((1.5, 2), TypeError, r"blob dimensions must be integers, got 1.5 in \(1.5, 2\)"),
    "2.0": ((2.0, 3), TypeError, "got 2.0"),
    "a string": (("2", 3), TypeError, "got '2'"),
    "True": ((True, 3), TypeError, "got True"),
    "numpy bool": ((np.True_, 3), TypeError, "got np.True_"),
    "None": ((None,), TypeError, "got None"),
    "negative": ((-1, 3), ValueError, r"blob shape \(-1, 3\) has a negative dimension -1"),
    "negative in a tuple": (((2, -3),), ValueError, "has a negative dimension -3"),
}


@pytest.fixture
def net(tmp_path):
    (tmp_path / "net.prototxt").write_text(NET)
    return caffe.Net(str(tmp_path / "net.prototxt"), caffe.TEST)


@pytest.mark.parametrize("case", sorted(BLOB_CASES))
def test_blob_reshape_refuses_impossible_dimensions(net, case):
    dims, error, message = BLOB_CASES[case]
    with pytest.raises(error, match=message):
        net.blobs["x"].reshape(*dims)
    assert net.blobs["x"].data.shape == (2, 3)   # unchanged


def test_a_negative_dimension_is_also_a_caffe_error(net):
    with pytest.raises(CaffeError):
        net.blobs["x"].reshape(-1, 3)


@pytest.mark.parametrize("dims", [(4, 3), ((5, 3),), (np.int64(1), np.int32(3)),
                                  (np.array([2, 3]),), (0, 3)])
def test_integer_dimensions_still_reshape(net, dims):
    net.blobs["x"].reshape(*dims)
    expected = tuple(int(d) for d in (dims[0] if len(dims) == 1 else dims))
    assert net.blobs["x"].data.shape == expected
