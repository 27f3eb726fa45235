"""A LeNet-shaped net wholly on the GPU: same training as on the CPU, no CPU fallbacks, and
no blob copied to the host per iteration except the loss scalar (SoftmaxWithLoss also reads
back two label counts from a buffer of its own)."""
import logging

import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_cli import backend
from pycaffe_cli.log import LOG
from pycaffe_cli.net.net import Net
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.solvers import create_solver
from pycaffe_cli.synced_memory import Head, SyncedMemory

NET = """
name: "tiny_lenet"
force_backward: true
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 1 dim: 10 dim: 10 } shape { dim: 4 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 4 kernel_size: 3
                            weight_filler { type: "xavier" } bias_filler { type: "constant"
                            value: 0.1 } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "relu1" type: "ReLU" bottom: "pool1" top: "pool1" }
layer { name: "ip1" type: "InnerProduct" bottom: "pool1" top: "ip1"
        inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip1" bottom: "label" top: "loss" }
layer { name: "accuracy" type: "Accuracy" bottom: "ip1" bottom: "label" top: "accuracy" }
"""
RNG = np.random.default_rng(12)
IMAGES = RNG.normal(size=(4, 1, 10, 10)).astype(np.float32)
LABELS = np.array([0, 2, 1, 2], np.float32)


def feed(net):
    net.blob_by_name("data").data[...] = IMAGES
    net.blob_by_name("label").data[...] = LABELS


def train(gpu, iterations=4):
    """Losses and final weights of ``iterations`` SGD steps in one mode."""
    if gpu:
        backend.set_mode_gpu(0)
    try:
        text = (f"base_lr: 0.05 momentum: 0.9 weight_decay: 0.001 lr_policy: 'fixed' "
                f"max_iter: {iterations} random_seed: 3 snapshot_after_train: false "
                f"net_param {{ {NET} }}")
        solver = create_solver(text_format.Parse(text, caffe_pb2.SolverParameter()))
        feed(solver.net)
        losses = []
        for _ in range(iterations):
            solver.step(1)
            losses.append(float(solver.net.blob_by_name("loss").cpu_data))
        weights = [blob.cpu_data.copy() for blob in solver.net.learnable_params]
    finally:
        backend.set_mode_cpu()
    return losses, weights


@pytest.mark.gpu
def test_training_on_the_gpu_matches_the_cpu():
    cpu_losses, cpu_weights = train(gpu=False)
    gpu_losses, gpu_weights = train(gpu=True)
    assert cpu_losses[-1] < cpu_losses[0]
    np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=1e-4)
    for want, got in zip(cpu_weights, gpu_weights):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.fixture
def fallback_log(monkeypatch):
    monkeypatch.setitem(backend._state, "logged", set())
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: records.append(record.getMessage())
    LOG.addHandler(handler)
    yield records
    LOG.removeHandler(handler)


def test_a_gpu_iteration_runs_every_layer_on_the_device(gpu_mode, fallback_log, monkeypatch):
    backend.set_random_seed(1)
    net = Net(text_format.Parse(NET, caffe_pb2.NetParameter()), caffe_pb2.TRAIN)
    feed(net)
    net.forward_backward()                       # uploads the inputs and weights once
    copies_to_host = []
    plain_host = SyncedMemory.host

    def counting_host(memory):
        if memory.head is Head.AT_GPU:
            copies_to_host.append(memory.size)
        return plain_host(memory)
    monkeypatch.setattr(SyncedMemory, "host", counting_host)
    loss = net.forward_backward()
    assert [m for m in fallback_log if "no GPU" in m] == []
    assert copies_to_host == [1]                 # the loss scalar, nothing else
    assert loss > 0
    assert all(net.blob_by_name(name).data_memory.head is Head.AT_GPU
               for name in ("conv1", "pool1", "ip1", "accuracy"))
