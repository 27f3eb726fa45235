"""Python layers written against BVLC's interface (``import caffe``, ``caffe.Layer``) driven by
caffe.Net and by ``pycaffe train``: forward/backward/reshape, param_str, phase, learnable
blobs saved and shared, and the user's own exception coming back unchanged."""
import os
import re
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest

import caffe
from tests.numerics import close_to

PYCAFFE = os.path.join(os.path.dirname(sys.executable), "pycaffe")

LAYERS = """
import caffe
import numpy as np


class TimesParam(caffe.Layer):
    def setup(self, bottom, top):
        self.factor = float(self.param_str or 10)

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        top[0].data[...] = self.factor * bottom[0].data

    def backward(self, top, propagate_down, bottom):
        bottom[0].diff[...] = self.factor * top[0].diff


class Failing(caffe.Layer):
    def setup(self, bottom, top):
        raise RuntimeError("setup says no")


class Learnable(caffe.Layer):
    def setup(self, bottom, top):
        self.blobs.add_blob(1)
        self.blobs[0].data[0] = 0

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        top[0].data[...] = bottom[0].data

    def backward(self, top, propagate_down, bottom):
        self.blobs[0].diff[0] = 1


class Phase(caffe.Layer):
    def reshape(self, bottom, top):
        top[0].reshape()

    def forward(self, bottom, top):
        top[0].data[()] = self.phase


class EuclideanLoss(caffe.Layer):
    def setup(self, bottom, top):
        if len(bottom) != 2:
            raise Exception("needs two bottoms")

    def reshape(self, bottom, top):
        if bottom[0].count != bottom[1].count:
            raise Exception("bottoms must have the same count")
        self.diff = np.zeros_like(bottom[0].data, dtype=np.float32)
        top[0].reshape(1)

    def forward(self, bottom, top):
        self.diff[...] = bottom[0].data - bottom[1].data
        top[0].data[...] = np.sum(self.diff ** 2) / bottom[0].num / 2.0

    def backward(self, top, propagate_down, bottom):
        for i, sign in enumerate((1, -1)):
            if propagate_down[i]:
                bottom[i].diff[...] = sign * self.diff / bottom[i].num
"""


@pytest.fixture
def module(tmp_path, monkeypatch):
    name = f"caffe_layers_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(LAYERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def python_layer(name, module, cls, bottom="", top="", extra=""):
    bottoms = "".join(f' bottom: "{b}"' for b in bottom.split())
    tops = "".join(f' top: "{t}"' for t in top.split())
    return (f'layer {{ type: "Python" name: "{name}"{bottoms}{tops} '
            f'python_param {{ module: "{module}" layer: "{cls}" {extra} }} }}\n')


def chain_net(write, module):
    text = ('name: "chain" force_backward: true\ninput: "data" '
            'input_shape { dim: 10 dim: 9 dim: 8 }\n'
            + python_layer("one", module, "TimesParam", "data", "one")
            + python_layer("two", module, "TimesParam", "one", "two", 'param_str: "2"')
            + python_layer("three", module, "TimesParam", "two", "three", 'param_str: "0.5"'))
    return caffe.Net(write("chain.prototxt", text), caffe.TRAIN)


def test_forward_backward_and_reshape(write, module):
    net = chain_net(write, module)
    net.blobs["data"].data[...] = 8
    net.forward()
    assert set(net.blobs["three"].data.flat) == {80.0}
    net.blobs["three"].diff[...] = 7
    net.backward()
    assert set(net.blobs["data"].diff.flat) == {70.0}
    net.blobs["data"].reshape(4, 4, 4, 4)
    net.forward()
    assert all(blob.data.shape == (4, 4, 4, 4) for blob in net.blobs.values())
    assert net.layer_dict["two"].type == "Python" and net.layer_dict["two"].factor == 2.0


def test_the_users_exception_comes_back_as_itself(write, module):
    text = ('input: "data" input_shape { dim: 2 }\n'
            + python_layer("bad", module, "Failing", "data", "out"))
    with pytest.raises(RuntimeError, match="setup says no"):
        caffe.Net(write("bad.prototxt", text), caffe.TEST)


def test_learnable_blobs_are_saved_loaded_and_shared(write, module, tmp_path):
    path = write("p.prototxt", 'force_backward: true input: "data" '
                 'input_shape { dim: 2 dim: 3 }\n'
                 + python_layer("layer", module, "Learnable", "data", "out"))
    net = caffe.Net(path, caffe.TRAIN)
    net.forward()
    net.backward()
    layer = net.layer_dict["layer"]
    assert layer.blobs[0].data[0] == 0 and layer.blobs[0].diff[0] == 1
    assert net.params["layer"] is layer.blobs and layer.blobs[0].count == 1
    layer.blobs[0].data[0] += layer.blobs[0].diff[0]
    weights = str(tmp_path / "p.caffemodel")
    net.save(weights)
    layer.blobs[0].data[0] = -1
    net.copy_from(weights)
    assert layer.blobs[0].data[0] == 1
    other = caffe.Net(path, caffe.TRAIN)
    other.share_with(net)
    assert other.layer_dict["layer"].blobs[0].data[0] == 1


def test_phase(write, module):
    path = write("phase.prototxt", python_layer("layer", module, "Phase", top="phase"))
    for phase in (caffe.TRAIN, caffe.TEST):
        assert caffe.Net(path, phase).forward()["phase"] == phase


def test_engine_layer_base_still_works(write, tmp_path, monkeypatch):
    name = f"engine_layers_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent("""
        from pycaffe_cli.layers.base import Layer

        class Double(Layer):
            def reshape(self, bottom, top):
                top[0].reshape(*bottom[0].shape)

            def forward(self, bottom, top):
                top[0].data[...] = 2 * bottom[0].data
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    path = write("e.prototxt", 'input: "x" input_shape { dim: 3 }\n'
                 + python_layer("double", name, "Double", "x", "y"))
    try:
        net = caffe.Net(path, caffe.TEST)
        assert net.forward(x=np.array([1.0, 2, 3]))["y"].tolist() == [2, 4, 6]
        assert net.layers[1].type == "Python"
    finally:
        sys.modules.pop(name, None)


LINREG = """
name: "LinearRegression"
layer { type: "DummyData" name: "x" top: "x"
  dummy_data_param { shape { dim: 10 dim: 3 dim: 2 } data_filler { type: "gaussian" } } }
layer { type: "DummyData" name: "y" top: "y"
  dummy_data_param { shape { dim: 10 dim: 3 dim: 2 } data_filler { type: "gaussian" } } }
layer { type: "InnerProduct" name: "ipx" top: "ipx" bottom: "x"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { type: "InnerProduct" name: "ipy" top: "ipy" bottom: "y"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { type: "Python" name: "loss" top: "loss" bottom: "ipx" bottom: "ipy"
  python_param { module: "MODULE" layer: "EuclideanLoss" } loss_weight: 1 }
"""


def test_python_loss_layer_matches_numpy(write, module):
    net = caffe.Net(write("linreg.prototxt", LINREG.replace("MODULE", module)),
                    caffe.TRAIN)
    loss = net.forward()["loss"]
    ipx, ipy = net.blobs["ipx"].data, net.blobs["ipy"].data
    assert loss == pytest.approx(((ipx - ipy) ** 2).sum() / 10 / 2, rel=1e-6)
    net.backward()
    close_to(net.blobs["ipx"].diff, (ipx - ipy) / 10, rtol=1e-6)
    close_to(net.blobs["ipy"].diff, (ipy - ipx) / 10, rtol=1e-6)


@pytest.mark.slow
def test_python_loss_layer_trains_from_the_command_line(write, module, tmp_path):
    write("linreg.prototxt", LINREG.replace("MODULE", module))
    write("solver.prototxt", """
        net: "linreg.prototxt" base_lr: 0.01 momentum: 0.9 lr_policy: "fixed"
        max_iter: 40 display: 10 random_seed: 3 snapshot_after_train: false
        """)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    result = subprocess.run([PYCAFFE, "train", "--solver", "solver.prototxt"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    losses = [float(v) for v in re.findall(r"Iteration \d+ \(.*\), loss = ([\d.e+-]+)",
                                           result.stderr)]
    assert len(losses) == 4 and losses[-1] < 0.5 * losses[0]
