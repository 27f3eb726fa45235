"""Test-only layers and helpers for the solver tests.

``SolverTestDot``: loss = g . w + b with learnable w (shape of the bottom) and b (shape (1,)),
so dL/dw = g (the bottom) and dL/db = 1: constant, hand-computable gradients.
``SolverTestCounter``: a stateful data layer whose top is ``value * k`` on its k-th forward
(k = 1, 2, ...), with get_state/set_state, to test iter_size, smoothing and exact resume.
"""
import logging

import numpy as np
from google.protobuf import text_format

from pycaffe_cli.blob import Blob
from pycaffe_cli.layers.base import Layer
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2


class DotLossLayer(Layer):
    type = "SolverTestDot"
    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        if not self.blobs:
            self.blobs = [Blob(bottom[0].shape), Blob((1,))]
            self.param_propagate_down = [True, True]

    def reshape(self, bottom, top):
        top[0].reshape(())

    def default_loss_weight(self, top_index):
        return 1.0

    def forward_cpu(self, bottom, top):
        w, b = self.blobs
        top[0].data[...] = np.dot(bottom[0].flat_data, w.flat_data) + b.flat_data[0]

    def backward_cpu(self, top, propagate_down, bottom):
        scale = top[0].diff[()]
        w, b = self.blobs
        if self.param_propagate_down[0]:
            w.flat_diff[:] += scale * bottom[0].flat_data
        if self.param_propagate_down[1]:
            b.flat_diff[:] += scale


class CounterLayer(Layer):
    type = "SolverTestCounter"
    """Top (shape from dummy_data_param.shape[0]) = data_filler[0].value * forward count."""

    exact_num_bottom = 0
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.param.dummy_data_param
        self.value = p.data_filler[0].value if p.data_filler else 1.0
        self.count = 0
        top[0].reshape(tuple(p.shape[0].dim))

    def reshape(self, bottom, top):
        pass

    def forward_cpu(self, bottom, top):
        self.count += 1
        top[0].data[...] = self.value * self.count

    def get_state(self):
        return {"count": self.count}

    def set_state(self, state):
        self.count = state["count"]


def solver_param(text):
    return text_format.Parse(text, caffe_pb2.SolverParameter())


def dot_net(g_values, w0, b0=0.0, lr_mults=None, decay_mults=None, name="dot"):
    """Net text: Input "g" (data set by the test) -> SolverTestDot with weights w0, b0."""
    specs = ""
    for lr, decay in zip(lr_mults or [], decay_mults or []):
        specs += f"param {{ lr_mult: {lr} decay_mult: {decay} }} "
    w = " ".join(f"data: {v!r}" for v in w0)
    return f"""
    name: "{name}"
    layer {{ name: "g" type: "Input" top: "g" input_param {{ shape {{ dim: {len(g_values)} }} }} }}
    layer {{ name: "dot" type: "SolverTestDot" bottom: "g" top: "loss" {specs}
             blobs {{ shape {{ dim: {len(w0)} }} {w} }}
             blobs {{ shape {{ dim: 1 }} data: {b0!r} }} }}
    """


def set_input(solver, g_values):
    for net in [solver.net] + solver.test_nets:
        net.blob_by_name("g").data[...] = np.asarray(g_values, np.float32)


def weights(solver, layer="dot"):
    return [blob.data.copy() for blob in solver.net.layer_by_name(layer).blobs]


class LogCapture(logging.Handler):
    """Collects pycaffe's log messages (text only) while installed."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.messages = []
        self.levels = []

    def emit(self, record):
        self.messages.append(record.getMessage())
        self.levels.append(record.levelname)

    def __enter__(self):
        self._level = LOG.level
        LOG.addHandler(self)
        LOG.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc):
        LOG.removeHandler(self)
        LOG.setLevel(self._level)

    def matching(self, prefix):
        return [m for m in self.messages if m.startswith(prefix)]

    def warnings(self):
        return [m for m, level in zip(self.messages, self.levels) if level == "WARNING"]
