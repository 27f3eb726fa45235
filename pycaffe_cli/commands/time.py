"""``pycaffe time``: benchmark a model layer by layer (Caffe's ``time()`` in tools/caffe.cpp).

As in Caffe, every layer's backward runs with the net's ``bottom_need_backward``, whether or
not the layer needs backward in training, and the net is assumed to feed itself (data layers
or Input layers whose blobs keep their contents).
"""
import time as clock

from pycaffe_cli import backend
from pycaffe_cli.commands import split_list, subcommand
from pycaffe_cli.commands.common import require, use_single_device
from pycaffe_cli.log import LOG


@subcommand("time", summary="benchmark model execution time",
            flags=("model", "iterations", "phase", "gpu", "level", "stage"))
def time(model, iterations, phase, gpu, level, stage):
    """Benchmark a model: average forward and backward time per layer over --iterations
    passes of the --phase net (default TRAIN)."""
    require(model, "Need a model definition to time.")
    stages = split_list(stage)
    use_single_device(gpu)
    from pycaffe_cli.net import Net
    from pycaffe_cli.proto import caffe_pb2

    net_phase = caffe_pb2.TEST if phase == "TEST" else caffe_pb2.TRAIN
    net = Net.from_file(model, net_phase, level, stages)

    # A clean pass first, so allocations are done before the clock starts.
    LOG.info("Performing Forward")
    LOG.info(f"Initial loss: {net.forward():g}")
    LOG.info("Performing Backward")
    net.backward()
    _benchmark(net, iterations)
    return 0


def _benchmark(net, iterations):
    layers, bottoms, tops = net.layers, net.bottom_vecs, net.top_vecs
    forward_layer = [0.0] * len(layers)
    backward_layer = [0.0] * len(layers)
    forward_total = backward_total = 0.0
    LOG.info("*** Benchmark begins ***")
    LOG.info(f"Testing for {iterations} iterations.")
    total_start = clock.perf_counter()
    for j in range(iterations):
        iter_start = clock.perf_counter()
        for i, layer in enumerate(layers):
            start = clock.perf_counter()
            layer.forward(bottoms[i], tops[i])
            backend.synchronize()   # GPU work is queued: wait for it before reading the clock
            forward_layer[i] += clock.perf_counter() - start
        forward_end = clock.perf_counter()
        forward_total += forward_end - iter_start
        for i in reversed(range(len(layers))):
            start = clock.perf_counter()
            layers[i].backward(tops[i], net.bottom_need_backward[i], bottoms[i])
            backend.synchronize()
            backward_layer[i] += clock.perf_counter() - start
        backward_total += clock.perf_counter() - forward_end
        LOG.info(f"Iteration: {j + 1} forward-backward time: "
                 f"{_ms(clock.perf_counter() - iter_start):g} ms.")
    LOG.info("Average time per layer: ")
    for i, name in enumerate(net.layer_names):
        LOG.info(f"{name:>10}\tforward: {_ms(forward_layer[i]) / iterations:g} ms.")
        LOG.info(f"{name:>10}\tbackward: {_ms(backward_layer[i]) / iterations:g} ms.")
    total = _ms(clock.perf_counter() - total_start)
    LOG.info(f"Average Forward pass: {_ms(forward_total) / iterations:g} ms.")
    LOG.info(f"Average Backward pass: {_ms(backward_total) / iterations:g} ms.")
    LOG.info(f"Average Forward-Backward: {total / iterations:g} ms.")
    LOG.info(f"Total Time: {total:g} ms.")
    LOG.info("*** Benchmark ends ***")


def _ms(seconds):
    return seconds * 1000.0
