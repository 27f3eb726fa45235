"""Python layers: the user's class driven through setup/reshape/forward/backward with pycaffe's
blob interface, param_str and phase, learnable blobs trained by a solver and snapshotted,
errors (missing module or class, exceptions in user code with their traceback), and the
example model trained from the command line."""
import os
import re
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.blob import Blob
from pycaffe_cli.layers.python import PyBlob
from pycaffe_cli.net.net import Net
from pycaffe_cli.net.weights import copy_trained_layers_from
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.solvers import create_solver
from pycaffe_cli.testing import check_gradient
from tests.layer_helpers import set_up
from tests.numerics import close_to

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYCAFFE = os.path.join(os.path.dirname(sys.executable), "pycaffe")
EXAMPLE = os.path.join(ROOT, "models", "python_layer_example")

LAYERS = """
import numpy as np
from pycaffe_cli.layers.base import Layer


class TimesTen(Layer):
    def setup(self, bottom, top):
        self.setup_calls = getattr(self, "setup_calls", 0) + 1

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        top[0].data[...] = 10 * bottom[0].data

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            bottom[0].diff[...] = 10 * top[0].diff


class Echo(Layer):
    def setup(self, bottom, top):
        self.value = float(self.param_str)

    def reshape(self, bottom, top):
        top[0].reshape(2)
        top[1].reshape((1, 3))

    def forward(self, bottom, top):
        top[0].data[...] = [self.value, self.phase]
        top[1].data[...] = bottom[0].count


class AddBias(Layer):
    def setup(self, bottom, top):
        if not self.blobs:
            self.blobs.add_blob(1)

    def reshape(self, bottom, top):
        top[0].reshape(bottom[0].shape)

    def forward(self, bottom, top):
        top[0].data[...] = bottom[0].data + self.blobs[0].data[0]

    def backward(self, top, propagate_down, bottom):
        self.blobs[0].diff[0] += top[0].diff.sum()
        if propagate_down[0]:
            bottom[0].diff[...] = top[0].diff


class Broken(Layer):
    def setup(self, bottom, top):
        if self.param_str == "setup":
            raise RuntimeError("bad param_str")

    def reshape(self, bottom, top):
        top[0].reshape(1)

    def forward(self, bottom, top):
        top[0].data[...] = self.helper()

    def helper(self):
        return 1 / 0


class NoReshape(Layer):
    def forward(self, bottom, top):
        pass


class ForwardOnly(Layer):
    def reshape(self, bottom, top):
        top[0].reshape(1)

    def forward(self, bottom, top):
        top[0].data[...] = 0
"""


@pytest.fixture
def module(tmp_path, monkeypatch):
    """Write LAYERS (or given source) as a uniquely named module on sys.path; its name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written = []

    def write(source=LAYERS):
        name = f"user_layers_{uuid.uuid4().hex[:12]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)
        return name
    yield write
    for name in written:
        sys.modules.pop(name, None)


def python(module_name, cls, extra=""):
    return (f'name: "py" type: "Python" python_param {{ module: "{module_name}" '
            f'layer: "{cls}" {extra} }}')


def test_forward_backward_and_gradient(module):
    x = np.random.default_rng(0).normal(size=(2, 3, 4))
    layer, bottom, top = set_up(python(module(), "TimesTen"), [x])
    assert layer.impl.setup_calls == 1
    assert top[0].shape == x.shape
    layer.forward(bottom, top)
    close_to(top[0].data, 10 * x, rtol=1e-6)
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize("phase", [caffe_pb2.TRAIN, caffe_pb2.TEST])
def test_param_str_phase_and_pycaffe_reshape(module, phase):
    layer, bottom, top = set_up(python(module(), "Echo", 'param_str: "2.5"'),
                                [np.zeros((4, 5))], num_tops=2, phase=phase)
    assert layer.impl.param_str == "2.5" and layer.impl.phase == phase
    layer.forward(bottom, top)
    assert top[0].shape == (2,) and top[1].shape == (1, 3)
    assert top[0].data.tolist() == [2.5, phase]
    assert top[1].data.tolist() == [[20, 20, 20]]


def test_learnable_blob_is_updated_by_the_solver_and_snapshotted(module, tmp_path):
    name = module()
    solver_param = text_format.Parse(f"""
        base_lr: 0.1 lr_policy: "fixed" max_iter: 1 display: 0 random_seed: 1
        snapshot_prefix: "{tmp_path / 'snap'}"
        train_net_param {{
          layer {{ name: "data" type: "DummyData" top: "data"
                  dummy_data_param {{ shape {{ dim: 2 dim: 3 }}
                                      data_filler {{ type: "constant" value: 1 }} }} }}
          layer {{ name: "bias" type: "Python" bottom: "data" top: "out"
                  python_param {{ module: "{name}" layer: "AddBias" }} }}
          layer {{ name: "loss" type: "Reduction" bottom: "out" top: "loss" loss_weight: 1 }}
        }}""", caffe_pb2.SolverParameter())
    solver = create_solver(solver_param)
    layer = solver.net.layer_by_name("bias")
    assert len(layer.blobs) == 1 and isinstance(layer.blobs[0], Blob)
    assert isinstance(layer.impl.blobs[0], PyBlob) and layer.impl.blobs[0].blob is layer.blobs[0]
    assert layer.blobs[0] in solver.net.learnable_params
    solver.step(1)  # loss = sum(1 + b): d loss / d b = 6, so b = 0 - 0.1 * 6
    assert layer.blobs[0].data.tolist() == [np.float32(-0.6)]
    solver.snapshot()
    fresh = Net(solver_param.train_net_param, caffe_pb2.TRAIN)
    copy_trained_layers_from(fresh, str(tmp_path / "snap_iter_1.caffemodel"))
    assert fresh.layer_by_name("bias").blobs[0].data.tolist() == [np.float32(-0.6)]
    assert fresh.forward() == pytest.approx(6 * 0.4, rel=1e-6)


def test_missing_module(module):
    with pytest.raises(CaffeError, match='layer "py": cannot import the Python layer module '
                                         '"no_such_user_module_xyz"'):
        set_up(python("no_such_user_module_xyz", "Layer"), [np.zeros(2)])


def test_missing_class(module):
    name = module()
    with pytest.raises(CaffeError, match=f'layer "py": the Python layer module "{name}" .* has '
                                         'no class "Nope"'):
        set_up(python(name, "Nope"), [np.zeros(2)])


def test_missing_names():
    with pytest.raises(CaffeError, match='"py".*module and the layer'):
        set_up('name: "py" type: "Python"', [np.zeros(2)])


def test_exception_in_forward_carries_the_users_traceback(module):
    name = module()
    layer, bottom, top = set_up(python(name, "Broken"), [np.zeros(2)])
    with pytest.raises(CaffeError) as caught:
        layer.forward(bottom, top)
    message = str(caught.value)
    assert message.startswith(f'layer "py": Python layer {name}.Broken: forward raised '
                              "ZeroDivisionError: division by zero")
    assert caught.value.layer == "py"
    assert "Traceback (most recent call last):" in message
    assert f"{name}.py\", line" in message and "in helper" in message
    assert "return 1 / 0" in message and "top[0].data[...] = self.helper()" in message
    assert "python.py" not in message  # only the user's own frames


def test_exception_in_setup(module):
    with pytest.raises(CaffeError, match=r'(?s)"py".*setup raised RuntimeError: bad param_str'
                                         r'.*raise RuntimeError'):
        set_up(python(module(), "Broken", 'param_str: "setup"'), [np.zeros(2)])


def test_exception_while_importing_the_module(module):
    name = module("import numpy\nraise ImportError('needs a GPU')\n")
    with pytest.raises(CaffeError, match=rf'(?s)"py".*importing module "{name}" raised '
                                         rf"ImportError: needs a GPU.*{name}.py"):
        set_up(python(name, "Anything"), [np.zeros(2)])


EXITING = """
import sys
from pycaffe_cli.layers.base import Layer


class Exiting(Layer):
    def reshape(self, bottom, top):
        top[0].reshape(1)

    def forward(self, bottom, top):
        sys.exit(int(self.param_str))

    def backward(self, top, propagate_down, bottom):
        raise KeyboardInterrupt
"""


def test_sys_exit_in_forward_is_an_error_naming_the_layer(module):
    name = module(EXITING)
    layer, bottom, top = set_up(python(name, "Exiting", 'param_str: "3"'), [np.zeros(2)])
    with pytest.raises(CaffeError) as caught:
        layer.forward(bottom, top)
    assert str(caught.value).startswith(f'layer "py": Python layer {name}.Exiting called '
                                        f"sys.exit(3) in forward ({module_file(name)}")
    assert caught.value.layer == "py"
    assert isinstance(caught.value.user_exception, SystemExit)
    assert caught.value.user_exception.code == 3


def test_sys_exit_while_importing_the_module(module):
    name = module("import sys\nsys.exit('no GPU here')\n")
    with pytest.raises(CaffeError, match=rf'"py": Python layer {name}.Any called '
                                         rf"sys.exit\('no GPU here'\) in module \"{name}\" at "
                                         "import"):
        set_up(python(name, "Any"), [np.zeros(2)])


def test_keyboard_interrupt_in_a_python_layer_stays_ctrl_c(module):
    layer, bottom, top = set_up(python(module(EXITING), "Exiting", 'param_str: "0"'),
                                [np.zeros(2)])
    with pytest.raises(KeyboardInterrupt):
        layer.backward(top, [True], bottom)


def module_file(module_name):
    return sys.modules[module_name].__file__


def test_missing_methods(module):
    name = module()
    with pytest.raises(CaffeError, match='"py".*defines no reshape'):
        set_up(python(name, "NoReshape"), [np.zeros(2)])
    layer, bottom, top = set_up(python(name, "ForwardOnly"), [np.zeros(2)])
    layer.forward(bottom, top)
    with pytest.raises(CaffeError, match='"py".*defines no backward'):
        layer.backward(top, [True], bottom)


def test_module_in_the_working_directory(tmp_path, monkeypatch):
    name = f"cwd_layers_{uuid.uuid4().hex[:12]}"
    (tmp_path / f"{name}.py").write_text(LAYERS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    try:
        layer, bottom, top = set_up(python(name, "TimesTen"), [np.ones(3)])
        assert str(tmp_path) in sys.path
    finally:
        sys.modules.pop(name, None)


def test_example_model_trains_from_the_command_line(tmp_path):
    solver = open(os.path.join(EXAMPLE, "solver.prototxt")).read()
    solver = (solver.replace('net: "models/', f'net: "{ROOT}/models/')
              .replace("max_iter: 200", "max_iter: 60").replace("test_interval: 100",
                                                                 "test_interval: 60"))
    (tmp_path / "solver.prototxt").write_text(solver)
    env = dict(os.environ, PYTHONPATH=EXAMPLE)
    result = subprocess.run([PYCAFFE, "train", "--solver", "solver.prototxt"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    losses = [float(v) for v in re.findall(r"Iteration \d+ \(.*\), loss = ([\d.e+-]+)",
                                           result.stderr)]
    assert len(losses) == 3 and losses[0] > 10 * losses[-1]
    assert "Optimization Done." in result.stderr
