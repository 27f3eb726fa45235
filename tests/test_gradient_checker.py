"""The gradient checker itself: it accepts right gradients and catches wrong ones."""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.layers.base import NeuronLayer
from pycaffe_cli.testing import GradientCheckFailure, check_gradient
from tests.layer_helpers import blob_of, layer_param


class Cube(NeuronLayer):
    """y = x^3, with a deliberately scaled backward when ``factor`` != 3."""

    type = "TestCube"
    factor = 3.0

    def forward_cpu(self, bottom, top):
        top[0].data[...] = bottom[0].data ** 3

    def backward_cpu(self, top, propagate_down, bottom):
        if propagate_down[0]:
            bottom[0].diff[...] = self.factor * bottom[0].data ** 2 * top[0].diff


def make(factor):
    layer = Cube(layer_param('name: "cube" type: "TestCube"'))
    layer.factor = factor
    bottom = [blob_of(np.random.default_rng(0).uniform(-1, 1, (2, 3)))]
    top = [blob_of(np.zeros(0))]
    layer.setup(bottom, top)
    return layer, bottom, top


@pytest.mark.parametrize("mode", ["random", "exhaustive"])
def test_correct_gradient_passes(mode):
    layer, bottom, top = make(3.0)
    check_gradient(layer, bottom, top, mode=mode)


@pytest.mark.parametrize("mode", ["random", "exhaustive"])
def test_wrong_gradient_is_caught(mode):
    layer, bottom, top = make(3.3)
    with pytest.raises(GradientCheckFailure, match="cube.*bottom\\[0\\]"):
        check_gradient(layer, bottom, top, mode=mode)


class GpuCube(Cube):
    """Cube with a GPU path (host maths is enough: the checker only sees which path runs).
    ``gpu_factor`` scales the GPU's backward, ``gpu_offset`` shifts the GPU's forward."""

    type = "TestGpuCube"
    gpu_factor = 3.0
    gpu_offset = 0.0

    def __init__(self, param):
        super().__init__(param)
        self.runs = {"forward_cpu": 0, "forward_gpu": 0}

    def forward_cpu(self, bottom, top):
        self.runs["forward_cpu"] += 1
        super().forward_cpu(bottom, top)

    def forward_gpu(self, bottom, top):
        self.runs["forward_gpu"] += 1
        top[0].data[...] = bottom[0].data ** 3 + self.gpu_offset

    def backward_gpu(self, top, propagate_down, bottom):
        if propagate_down[0]:
            bottom[0].diff[...] = self.gpu_factor * bottom[0].data ** 2 * top[0].diff


def make_gpu(gpu_factor=3.0, gpu_offset=0.0):
    layer = GpuCube(layer_param('name: "cube" type: "TestGpuCube"'))
    layer.gpu_factor, layer.gpu_offset = gpu_factor, gpu_offset
    bottom = [blob_of(np.random.default_rng(0).uniform(-1, 1, (2, 3)))]
    top = [blob_of(np.zeros(0))]
    layer.setup(bottom, top)
    return layer, bottom, top


def test_in_gpu_mode_the_gpu_backward_meets_cpu_finite_differences(gpu_mode):
    layer, bottom, top = make_gpu()
    check_gradient(layer, bottom, top)
    # the top weights' forward and the analytic pass's; then one CPU forward per difference
    assert layer.runs["forward_gpu"] == 2
    assert layer.runs["forward_cpu"] == 1 + 2 * (3 + 6)
    assert backend.mode() is backend.Mode.GPU


def test_in_gpu_mode_a_wrong_gpu_backward_is_caught(gpu_mode):
    layer, bottom, top = make_gpu(gpu_factor=3.3)   # the CPU's backward is right
    with pytest.raises(GradientCheckFailure, match="cube.*bottom\\[0\\].*analytic"):
        check_gradient(layer, bottom, top)
    assert backend.mode() is backend.Mode.GPU


def test_a_gpu_forward_the_cpu_does_not_match_is_caught(gpu_mode):
    layer, bottom, top = make_gpu(gpu_offset=1e-3)
    expected = "top\\[0\\] at .*the GPU's forward gives .*numeric_engine='same'"
    with pytest.raises(GradientCheckFailure, match=expected):
        check_gradient(layer, bottom, top)
    assert backend.mode() is backend.Mode.GPU


def test_numeric_engine_same_differentiates_the_gpu_forward(gpu_mode):
    layer, bottom, top = make_gpu(gpu_offset=1e-3)   # a constant shift: same derivative
    check_gradient(layer, bottom, top, numeric_engine="same")
    assert layer.runs["forward_cpu"] == 0
    assert layer.runs["forward_gpu"] == 2 + 2 * (3 + 6)


def test_an_unknown_numeric_engine_is_refused():
    layer, bottom, top = make(3.0)
    with pytest.raises(ValueError, match="numeric_engine must be 'cpu' or 'same', got 'gpu'"):
        check_gradient(layer, bottom, top, numeric_engine="gpu")
