"""ImageData labels: Caffe reads each with atoi into an int, so any 32-bit int (negative ones
too) is a label, and anything else in the list file is refused naming the file and line."""
import numpy as np
import pytest
from PIL import Image

from pycaffe_cli.errors import CaffeError
from tests.cli.conftest import interactive_sigint, run_cli  # noqa: F401 (fixtures)
from tests.layer_helpers import set_up

INT_MIN, INT_MAX = -2 ** 31, 2 ** 31 - 1


@pytest.fixture
def folder(tmp_path):
    """One 2x3 PNG, ``a.png``, beside the list file the tests write."""
    Image.fromarray(np.zeros((2, 3, 3), np.uint8)).save(tmp_path / "a.png")
    return tmp_path


def layer_text(folder, batch=1):
    return (f'name: "img" type: "ImageData" top: "data" top: "label" image_data_param {{ '
            f'source: "{folder / "list.txt"}" root_folder: "{folder}/" '
            f'batch_size: {batch} }}')


def read_labels(folder, labels):
    (folder / "list.txt").write_text("".join(f"a.png {label}\n" for label in labels))
    layer, bottom, top = set_up(layer_text(folder, len(labels)), [], 2)
    layer.forward(bottom, top)
    return top[1].data.tolist()


@pytest.mark.parametrize("text, value", [
    ("0", 0), ("7", 7), ("-1", -1), ("+5", 5), ("007", 7), ("-0", 0),
    (str(INT_MAX), INT_MAX), (str(INT_MIN), INT_MIN), ("0" * 40 + "3", 3),
])
def test_every_32_bit_int_is_a_label(folder, text, value):
    # the top is float32, as Caffe's Dtype: INT_MAX comes out as 2^31
    assert read_labels(folder, [text]) == [float(np.float32(value))]


@pytest.mark.parametrize("text", [
    str(INT_MAX + 1), str(INT_MIN - 1), str(2 ** 40), "-" + str(2 ** 40), "9" * 5000,
])
def test_a_label_outside_int_is_refused_naming_the_file_and_line(folder, text):
    (folder / "list.txt").write_text(f"a.png 1\na.png {text}\n")
    with pytest.raises(CaffeError) as caught:
        set_up(layer_text(folder), [], 2)
    message = str(caught.value)
    assert message.startswith(f'layer "img": {folder / "list.txt"}:2: label ')
    assert "outside the range of a 32-bit int" in message and len(message) < 300


@pytest.mark.parametrize("text", ["1.5", "1_000", "0x10", "1e3", "\u0663", "--1", "label"])
def test_a_label_that_is_not_a_decimal_integer_is_refused(folder, text):
    (folder / "list.txt").write_text(f"a.png {text}\n")
    with pytest.raises(CaffeError, match=r"list.txt:1: expected '<path> <integer label>'"):
        set_up(layer_text(folder), [], 2)


def test_the_command_line_reports_the_label_in_one_line(folder, run_cli):
    (folder / "list.txt").write_text(f"a.png {2 ** 40}\n")
    net = folder / "net.prototxt"
    net.write_text(f"layer {{ {layer_text(folder)} }}\n")
    result = run_cli("time", "--model", net, "--iterations", "1")
    assert result.code == 1 and "Traceback" not in result.err
    assert result.error_lines() == [
        f'pycaffe: error: {net}:1: layer "img": {folder / "list.txt"}:1: label {2 ** 40} is '
        f"outside the range of a 32-bit int, which Caffe reads labels as ([{INT_MIN}, "
        f"{INT_MAX}])"]
