"""Python layers written for older Caffe forks (Fast/Faster R-CNN's caffe-fast-rcnn): they read
the parameter string as ``self.param_str_``, key their settings by ``str(self.phase)``
("TRAIN"/"TEST", as the boost enum printed), reshape tops inside forward and read
``bottom[i].data`` directly."""
import pickle
import sys
import textwrap
import uuid

import numpy as np
import pytest

import caffe

# Written the way py-faster-rcnn's layers are: settings chosen by str(self.phase), the
# parameters parsed from self.param_str_ (YAML there; a dict literal here), the top's first
# axis known only in forward.
LAYERS = textwrap.dedent("""
    import ast

    import caffe
    import numpy as np

    SETTINGS = {"TRAIN": 3, "TEST": 2}


    class KeepLargest(caffe.Layer):
        def setup(self, bottom, top):
            params = ast.literal_eval("{" + self.param_str_ + "}")
            self.offset = params["offset"]
            self.keep = SETTINGS[str(self.phase)]
            self.seen_phase = self.phase
            self.param_str_ = "'offset': %r" % (self.offset + 1)
            top[0].reshape(1, 2)

        def reshape(self, bottom, top):
            pass

        def forward(self, bottom, top):
            values = bottom[0].data.ravel()
            order = np.argsort(-values, kind="stable")[:self.keep]
            rows = np.stack([order, values[order] + self.offset], axis=1)
            top[0].reshape(*rows.shape)
            top[0].data[...] = rows

        def backward(self, top, propagate_down, bottom):
            pass
    """)

ENGINE_LAYER = textwrap.dedent("""
    from pycaffe_cli.layers.base import Layer


    class Echo(Layer):
        def setup(self, bottom, top):
            self.text = self.param_str_

        def reshape(self, bottom, top):
            top[0].reshape(*bottom[0].data.shape)

        def forward(self, bottom, top):
            top[0].data[...] = bottom[0].data
    """)


@pytest.fixture
def modules(tmp_path, monkeypatch):
    names = {kind: f"compat_{kind}_{uuid.uuid4().hex[:10]}" for kind in ("caffe", "engine")}
    (tmp_path / f"{names['caffe']}.py").write_text(LAYERS)
    (tmp_path / f"{names['engine']}.py").write_text(ENGINE_LAYER)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield names
    for name in names.values():
        sys.modules.pop(name, None)


def net_text(module, cls, param_str):
    return ('input: "x" input_shape { dim: 1 dim: 5 }\n'
            f'layer {{ name: "py" type: "Python" bottom: "x" top: "y" python_param {{ '
            f'module: "{module}" layer: "{cls}" param_str: "{param_str}" }} }}\n')


@pytest.mark.parametrize("phase,rows", [(caffe.TRAIN, 3), (caffe.TEST, 2)])
def test_faster_rcnn_style_layer(write, modules, phase, rows):
    net = caffe.Net(write("n.prototxt", net_text(modules["caffe"], "KeepLargest",
                                                 "'offset': 10")), phase)
    layer = net.layer_dict["py"]
    assert layer.offset == 10 and layer.keep == rows
    assert str(layer.seen_phase) == ("TRAIN" if phase == caffe.TRAIN else "TEST")
    # param_str_ is param_str under another name: writing one changes the other.
    assert layer.param_str == layer.param_str_ == "'offset': 11"
    x = np.array([[0.5, 3.0, -1.0, 2.0, 1.0]], dtype=np.float32)
    y = net.forward(x=x)["y"]
    expected = np.array([[1, 13.0], [3, 12.0], [4, 11.0]], dtype=np.float32)[:rows]
    assert y.shape == (rows, 2)
    np.testing.assert_array_equal(y, expected)


def test_engine_layer_subclass_also_gets_param_str_(write, modules):
    net = caffe.Net(write("e.prototxt", net_text(modules["engine"], "Echo", "abc")), caffe.TEST)
    assert net.layer_dict["py"].text == "abc"


def test_phase_values_behave_as_ints_and_print_as_names():
    assert (caffe.TRAIN, caffe.TEST) == (0, 1) and isinstance(caffe.TEST, int)
    assert (str(caffe.TRAIN), f"{caffe.TEST}", caffe.TEST.name) == ("TRAIN", "TEST", "TEST")
    assert f"{caffe.TEST:d}" == "1" and int(caffe.TRAIN) == 0
    assert {"TRAIN": 5}[str(caffe.TRAIN)] == 5 and ["a", "b"][caffe.TEST] == "b"
    assert caffe.Phase("test") == caffe.TEST and caffe.Phase(0) is not None
    assert pickle.loads(pickle.dumps(caffe.TEST)) == caffe.TEST
    with pytest.raises(ValueError):
        caffe.Phase(2)


def test_param_str_alias_on_a_bare_caffe_layer():
    layer = caffe.Layer(None)
    layer.param_str_ = "x"
    assert layer.param_str == "x"
    layer.param_str = "y"
    assert layer.param_str_ == "y"
