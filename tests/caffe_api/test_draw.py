"""caffe.draw and scripts/draw_net.py: labels and colours (no extra packages), the pydot graph
(needs pydot), and rendered images (also needs Graphviz's dot)."""
import importlib.util
import pathlib
import re
import shutil
import sys

import pytest
from google.protobuf import text_format

from caffe import draw
from pycaffe_cli.io.prototxt import read_net_param
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = sorted(str(path) for path in (ROOT / "models").glob("*/*.prototxt")
                if "solver" not in path.name)
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is missing")

NET = """
name: "small"
layer { name: "data" type: "Data" top: "data" top: "label"
        include { phase: TRAIN } data_param { source: "x" batch_size: 64 } }
layer { name: "input" type: "Input" top: "data" top: "label"
        include { phase: TEST } input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        param { lr_mult: 1 } param { lr_mult: 2 }
        convolution_param { num_output: 16 kernel_size: 3 stride: 2 pad: 1 } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool"
        pooling_param { pool: AVE kernel_size: 3 stride: 2 } }
layer { name: "fc" type: "InnerProduct" bottom: "pool" top: "fc"
        inner_product_param { num_output: 10 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss"
        exclude { phase: TEST } }
"""


def net_param(text=NET):
    return text_format.Parse(text, caffe_pb2.NetParameter())


def layer(name):
    return next(entry for entry in net_param().layer if entry.name == name)


# --- labels and colours: no pydot needed ----------------------------------------------------
def test_pooling_types():
    assert draw.get_pooling_types_dict() == {0: 'MAX', 1: 'AVE', 2: 'STOCHASTIC'}


def test_edge_labels():
    assert draw.get_edge_label(layer('data')) == 'Batch 64'
    assert draw.get_edge_label(layer('conv')) == '16'
    assert draw.get_edge_label(layer('fc')) == '10'
    assert draw.get_edge_label(layer('relu')) == '""'


def test_layer_labels():
    assert draw.get_layer_label(layer('conv'), 'LR') == \
        r'"conv\n(Convolution)\nkernel size: 3\nstride: 2\npad: 1"'
    assert draw.get_layer_label(layer('conv'), 'TB', display_lrm=True) == \
        '"conv (Convolution) kernel size: 3 stride: 2 pad: 1 lr mult: 1.0, 2.0"'
    assert draw.get_layer_label(layer('pool'), 'BT') == \
        '"pool (Pooling AVE) kernel size: 3 stride: 2 pad: 0"'
    assert draw.get_layer_label(layer('fc'), 'RL', display_lrm=True) == \
        r'"fc\n(InnerProduct)\nlr mult: 1.0, 1.0"'
    assert draw.get_layer_label(layer('relu'), 'LR', display_lrm=True) == r'"relu\n(ReLU)"'
    bare = caffe_pb2.LayerParameter(name='c', type='Deconvolution')
    assert draw.get_layer_label(bare, 'TB') == '"c (Deconvolution) kernel size: 1 stride: 1 pad: 0"'


def test_lr_mult_display_skips_frozen_layers():
    frozen = caffe_pb2.LayerParameter(name='f', type='InnerProduct')
    frozen.param.add(lr_mult=0)
    frozen.param.add(lr_mult=0)
    assert draw.get_layer_lr_mult(frozen) == (0.0, 0.0)
    assert draw.get_layer_label(frozen, 'TB', display_lrm=True) == '"f (InnerProduct)"'
    frozen.param[1].lr_mult = 3
    assert draw.get_layer_label(frozen, 'TB', display_lrm=True) == \
        '"f (InnerProduct) lr mult: 0.0, 3.0"'


def test_lr_mult_errors():
    with pytest.raises(ValueError, match="ReLU layers do not have a learning rate multiplier"):
        draw.get_layer_lr_mult(layer('relu'))
    many = caffe_pb2.LayerParameter(name='odd', type='Convolution')
    for _ in range(3):
        many.param.add()
    with pytest.raises(ValueError, match='layer "odd".*3 param entries'):
        draw.get_layer_lr_mult(many)
    one = caffe_pb2.LayerParameter(name='one', type='Convolution')
    one.param.add(lr_mult=0.5)
    assert draw.get_layer_lr_mult(one) == (0.5, 1.0)


def test_colours():
    assert [draw.choose_color_by_layertype(kind) for kind in
            ('Convolution', 'Deconvolution', 'Pooling', 'InnerProduct', 'ReLU')] == \
        ['#FF5050', '#FF5050', '#FF9900', '#CC33FF', '#6495ED']


def test_without_pydot_the_graph_asks_for_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, 'pydot', None)
    with pytest.raises(ImportError, match=r"pip install 'pycaffe\[draw\]'"):
        draw.get_pydot_graph(net_param(), 'LR')
    assert draw.get_layer_label(layer('relu'), 'LR') == r'"relu\n(ReLU)"'


# --- the graph: needs pydot ---------------------------------------------------------------
def colour(node):
    return node.get('fillcolor').strip('"')   # pydot versions differ in keeping the quotes


def graph_parts(graph):
    nodes = {node.get_name(): node for node in graph.get_nodes()}
    edges = [(edge.get_source(), edge.get_destination(), edge.get('label'))
             for edge in graph.get_edges()]
    return nodes, edges


def test_graph_nodes_edges_and_styles():
    pytest.importorskip("pydot")
    graph = draw.get_pydot_graph(net_param(), 'TB')
    assert graph.get_name() == 'small' and graph.get('rankdir') == 'TB'
    nodes, edges = graph_parts(graph)
    conv = '"conv (Convolution) kernel size: 3 stride: 2 pad: 1"'
    assert colour(nodes[conv]) == '#FF5050' and nodes[conv].get('shape') == 'record'
    assert colour(nodes['"relu (ReLU)"']) == '#90EE90'   # in place
    assert colour(nodes['"fc (InnerProduct)"']) == '#CC33FF'
    assert colour(nodes['"loss (SoftmaxWithLoss)"']) == '#6495ED'
    # a blob some layer reads is an octagon; a net output (last written) is a plain node
    assert nodes['pool'].get('shape') == 'octagon'
    assert nodes['loss'].get('shape') is None
    assert ('data', conv, '""') in edges
    assert (conv, 'conv', '16') in edges
    assert ('"data (Data)"', 'label', 'Batch 64') in edges
    assert ('"fc (InnerProduct)"', 'fc', '10') in edges
    assert len(edges) == 15


def test_graph_phase_filter_and_unlabelled_edges():
    pytest.importorskip("pydot")
    test_graph = draw.get_pydot_graph(net_param(), 'LR', phase=caffe_pb2.TEST)
    names = set(graph_parts(test_graph)[0])
    assert r'"input\n(Input)"' in names
    assert r'"data\n(Data)"' not in names and r'"loss\n(SoftmaxWithLoss)"' not in names
    train_graph = draw.get_pydot_graph(net_param(), 'LR', label_edges=False,
                                       phase=caffe_pb2.TRAIN)
    nodes, edges = graph_parts(train_graph)
    assert r'"input\n(Input)"' not in nodes and r'"loss\n(SoftmaxWithLoss)"' in nodes
    assert {label for _, _, label in edges} == {'""'}


def test_graph_refuses_include_and_exclude_together():
    pytest.importorskip("pydot")
    both = net_param('layer { name: "x" type: "ReLU" include { phase: TRAIN } '
                     'exclude { phase: TEST } }')
    with pytest.raises(ValueError, match="layer x has both include and exclude"):
        draw.get_pydot_graph(both, 'LR', phase=caffe_pb2.TRAIN)
    assert draw.get_pydot_graph(both, 'LR').get_name() == 'Net'


# --- images: needs pydot and dot -----------------------------------------------------------
def model_id(path):
    return pathlib.Path(path).parent.name + "/" + pathlib.Path(path).name


# Laying out ResNet-50's 300 nodes takes Graphviz seconds: pixels are its work, not ours.
# Every model goes through dot's parser (``canon``: no layout), the small ones to a PNG.
PNG_MODELS = [path for path in MODELS if pathlib.Path(path).parent.name in
              ("lenet", "caffenet", "mlp", "cifar10_quick")]


@needs_dot
@pytest.mark.parametrize("path", MODELS, ids=model_id)
def test_dot_reads_every_bundled_model(path):
    pytest.importorskip("pydot")
    param = read_net_param(path)
    canon = draw.draw_net(param, 'LR', ext='canon').decode()
    assert canon.startswith("digraph")
    for layer in param.layer:
        assert layer.name in canon, layer.name


@needs_dot
@pytest.mark.parametrize("path", PNG_MODELS, ids=model_id)
def test_bundled_models_draw_as_png(path):
    pytest.importorskip("pydot")
    assert draw.draw_net(read_net_param(path), 'LR').startswith(b'\x89PNG')


@needs_dot
def test_draw_net_to_file(tmp_path):
    pytest.importorskip("pydot")
    target = tmp_path / "net.svg"
    draw.draw_net_to_file(net_param(), str(target), 'BT', caffe_pb2.TEST, True)
    svg = target.read_text()
    assert svg.lstrip().startswith('<?xml') and 'input' in svg and 'SoftmaxWithLoss' not in svg


def test_missing_dot_is_a_clear_error(monkeypatch, tmp_path):
    pytest.importorskip("pydot")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="Graphviz"):
        draw.draw_net(net_param(), 'LR')


# --- scripts/draw_net.py ---------------------------------------------------------------------
@pytest.fixture
def draw_net_script():
    spec = importlib.util.spec_from_file_location("script_draw_net",
                                                  ROOT / "scripts" / "draw_net.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    saved = LOG.handlers[:], LOG.propagate, LOG.level
    yield module
    LOG.handlers[:], LOG.propagate = saved[0], saved[1]
    LOG.setLevel(saved[2])


@needs_dot
def test_script_draws(draw_net_script, tmp_path, capsys):
    pytest.importorskip("pydot")
    (tmp_path / "net.prototxt").write_text(NET)
    out = tmp_path / "net.png"
    code = draw_net_script.main([str(tmp_path / "net.prototxt"), str(out), "--rankdir", "TB",
                                 "--phase", "TRAIN", "--display_lrm"])
    assert code == 0 and out.read_bytes().startswith(b'\x89PNG')
    assert capsys.readouterr().out == f"Drawing net to {out}\n"


@pytest.mark.parametrize("args, message", [
    (["missing.prototxt", "x.png"], "cannot read net file"),
    (["net.prototxt", "x.png", "--phase", "VAL"], "Unknown phase: VAL"),
    (["bad.prototxt", "x.png"], r"bad.prototxt:1:\d+: "),
    (["both.prototxt", "x.png", "--phase", "TEST"], "layer x has both include and exclude"),
])
def test_script_errors_are_one_line(draw_net_script, tmp_path, monkeypatch, capsys, args,
                                    message):
    if "both.prototxt" in args:
        pytest.importorskip("pydot")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.prototxt").write_text(NET)
    (tmp_path / "bad.prototxt").write_text("layer { nme: 'x' }")
    (tmp_path / "both.prototxt").write_text(
        'layer { name: "x" type: "ReLU" include { phase: TRAIN } exclude { phase: TEST } }')
    assert draw_net_script.main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("draw_net.py: error: ")
    assert re.search(message, err[0])
    assert not (tmp_path / "x.png").exists()
