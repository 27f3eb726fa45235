"""``pycaffe time --batch N`` (a pycaffe addition): the net is built at batch size N."""
import os

import pytest
from google.protobuf import text_format

from pycaffe_cli.commands.common import BATCH_SIZE_PARAMS, with_batch
from pycaffe_cli.proto import caffe_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LENET = os.path.join(ROOT, "models", "lenet", "lenet_deploy.prototxt")


def top_shapes(result, layer):
    """The "Top shape: ..." lines logged while setting up ``layer``."""
    lines = result.messages
    start = lines.index(f"Setting up {layer}")
    return [line for line in lines[start + 1:start + 4] if line.startswith("Top shape:")]


def test_time_runs_a_deploy_net_at_the_batch_given(run_cli):
    result = run_cli("time", "--model", LENET, "--batch", "3", "--iterations", "1")
    assert result.code == 0, result.err[-2000:]
    assert top_shapes(result, "data") == ["Top shape: 3 1 28 28 (2352)"]
    assert top_shapes(result, "prob") == ["Top shape: 3 10 (30)"]
    assert "Setting the batch size to 3 (--batch)" in result.messages


def test_time_sets_the_batch_of_legacy_net_inputs(run_cli, write):
    model = write("legacy.prototxt", """\
        input: "data"
        input_dim: 10 input_dim: 2 input_dim: 4 input_dim: 4
        layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
                inner_product_param { num_output: 3 } }
        """)
    result = run_cli("time", "-model", model, "-batch=5", "-iterations", "1")
    assert result.code == 0, result.err[-2000:]
    assert top_shapes(result, "input") == ["Top shape: 5 2 4 4 (160)"]
    assert top_shapes(result, "ip") == ["Top shape: 5 3 (15)"]


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_a_bad_batch_is_a_usage_error(run_cli, value):
    result = run_cli("time", "--model", LENET, "--batch", value)
    assert result.code == 2
    assert len(result.error_lines()) == 1 and "Traceback" not in result.err
    assert result.error_lines()[0].startswith("pycaffe: error: Invalid value for '--batch'")


def test_a_batch_too_large_for_a_blob_is_one_located_line(run_cli, write):
    model = write("n.prototxt", 'layer { name: "data" type: "Input" top: "data" '
                                "input_param { shape { dim: 1 dim: 2 } } }\n")
    result = run_cli("time", "--model", model, "--batch", "2147483647", "--iterations", "1")
    assert result.code == 1 and "Traceback" not in result.err
    [line] = result.error_lines()
    assert "n.prototxt" in line and "INT_MAX" in line


def test_help_shows_batch_as_a_pycaffe_addition(run_cli):
    result = run_cli("time", "--help")
    assert result.code == 0
    assert "--batch N" in result.out and "A pycaffe addition" in result.out


def test_other_commands_ignore_batch_with_a_warning(run_cli):
    result = run_cli("test", "--batch", "4")
    assert "--batch is not used by 'test'; ignored" in result.messages[0]


def test_with_batch_sets_every_batch_field_and_leaves_the_original():
    param = text_format.Parse("""
        input: "a" input_shape { dim: 7 dim: 3 }
        input: "b" input_dim: 7 input_dim: 1 input_dim: 2 input_dim: 2
        layer { name: "in" type: "Input" top: "x" top: "y"
                input_param { shape { dim: 7 dim: 2 } shape { dim: 7 } } }
        layer { name: "dummy" type: "DummyData" top: "d" top: "e"
                dummy_data_param { shape { dim: 7 dim: 5 } num: 7 num: 7 channels: 1 } }
        layer { name: "data" type: "Data" top: "f" data_param { batch_size: 7 } }
        layer { name: "images" type: "ImageData" top: "g" image_data_param { batch_size: 7 } }
        layer { name: "h5" type: "HDF5Data" top: "h" hdf5_data_param { batch_size: 7 } }
        layer { name: "mem" type: "MemoryData" top: "i" memory_data_param { batch_size: 7 } }
        layer { name: "win" type: "WindowData" top: "j" window_data_param { batch_size: 7 } }
        layer { name: "ip" type: "InnerProduct" bottom: "x" top: "k"
                inner_product_param { num_output: 7 } }
        """, caffe_pb2.NetParameter())
    before = param.SerializeToString()
    out = with_batch(param, 2)
    assert param.SerializeToString() == before
    assert list(out.input_shape[0].dim) == [2, 3]
    assert list(out.input_dim) == [2, 1, 2, 2]
    assert [list(s.dim) for s in out.layer[0].input_param.shape] == [[2, 2], [2]]
    assert list(out.layer[1].dummy_data_param.shape[0].dim) == [2, 5]
    assert list(out.layer[1].dummy_data_param.num) == [2, 2]
    assert out.layer[1].dummy_data_param.channels == [1]
    sizes = [getattr(layer, field).batch_size
             for layer, field in zip(out.layer[2:7], BATCH_SIZE_PARAMS)]
    assert sizes == [2] * 5
    assert out.layer[7].inner_product_param.num_output == 7
