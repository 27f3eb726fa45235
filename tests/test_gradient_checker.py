"""The gradient checker itself: it accepts right gradients and catches wrong ones."""
import numpy as np
import pytest

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
