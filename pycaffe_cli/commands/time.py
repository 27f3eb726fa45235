"""``pycaffe time``: benchmark a model layer by layer (Caffe's ``time()`` in tools/caffe.cpp).

As in Caffe, every layer's backward runs with the net's ``bottom_need_backward``, whether or
not the layer needs backward in training, and the net is assumed to feed itself (data layers
or Input layers whose blobs keep their contents).

A pycaffe addition: a TEST-phase net in which no layer needs backward (a deploy net) runs
forward through an inference plan (pycaffe_cli/inference/plan.py; off with --noinference_plan).
The per-layer lines keep Caffe's format: a layer folded or fused into the one before it
reports 0 ms (its time is in that layer's line), and backward is not run (0 ms).
"""
import time as clock

from pycaffe_cli import backend
from pycaffe_cli.commands import split_list, subcommand
from pycaffe_cli.commands.common import net_from_file, require, use_single_device
from pycaffe_cli.commands.non_finite import NonFiniteWatch
from pycaffe_cli.log import LOG


@subcommand("time", summary="benchmark model execution time",
            flags=("model", "iterations", "phase", "batch", "gpu", "level", "stage",
                   "inference_plan"))
def time(model, iterations, phase, batch, gpu, level, stage, inference_plan):
    """Benchmark a model: average forward and backward time per layer over --iterations
    passes of the --phase net (default TRAIN), at batch size --batch where given; a TEST net
    that needs no backward runs forward only, through an inference plan (see the flag)."""
    require(model, "Need a model definition to time.")
    stages = split_list(stage)
    use_single_device(gpu)
    from pycaffe_cli.proto import caffe_pb2

    net_phase = caffe_pb2.TEST if phase == "TEST" else caffe_pb2.TRAIN
    net = net_from_file(model, net_phase, level, stages, batch)

    plan = None
    if (inference_plan and net_phase == caffe_pb2.TEST
            and not any(entry.need_backward for entry in net.layer_entries)):
        from pycaffe_cli.inference.plan import InferencePlan
        plan = InferencePlan(net)
        LOG.info(plan.summary() + "; backward is not run (the net needs none)")
    # A clean pass first, so allocations are done before the clock starts (and the plan's
    # blob layout is chosen: its trial passes).
    LOG.info("Performing Forward")
    loss = (plan or net).forward()
    LOG.info(f"Initial loss: {loss:g}")
    NonFiniteWatch(net, "Timing").check(loss, "Initial forward pass")
    if plan is not None:
        plan.settle_layout()
    else:
        LOG.info("Performing Backward")
        net.backward()
    _benchmark(net, iterations, plan)
    return 0


def _benchmark(net, iterations, plan):
    entries = net.layer_entries
    forward_layer = [0.0] * len(entries)
    backward_layer = [0.0] * len(entries)
    forward_total = backward_total = 0.0
    LOG.info("*** Benchmark begins ***")
    LOG.info(f"Testing for {iterations} iterations.")
    total_start = clock.perf_counter()
    for j in range(iterations):
        iter_start = clock.perf_counter()
        if plan is None:
            _forward_layers(entries, forward_layer)
        else:
            _forward_plan(plan, forward_layer)
        forward_end = clock.perf_counter()
        forward_total += forward_end - iter_start
        if plan is None:
            _backward_layers(entries, backward_layer)
        backward_total += clock.perf_counter() - forward_end
        LOG.info(f"Iteration: {j + 1} forward-backward time: "
                 f"{_ms(clock.perf_counter() - iter_start):g} ms.")
    _report(entries, forward_layer, backward_layer, forward_total, backward_total,
            clock.perf_counter() - total_start, iterations)


def _forward_layers(entries, forward_layer):
    for i, entry in enumerate(entries):
        start = clock.perf_counter()
        entry.layer.forward(entry.bottoms, entry.tops)
        backend.synchronize()   # GPU work is queued: wait for it before reading the clock
        forward_layer[i] += clock.perf_counter() - start


def _forward_plan(plan, forward_layer):
    """One forward of the plan, each step's time added to its first layer's."""
    at = [step.at for step in plan.steps]
    last = [clock.perf_counter()]

    def after_step(k):
        backend.synchronize()
        now = clock.perf_counter()
        forward_layer[at[k]] += now - last[0]
        last[0] = now
    plan.forward(after_step)


def _backward_layers(entries, backward_layer):
    for i in reversed(range(len(entries))):
        entry = entries[i]
        start = clock.perf_counter()
        entry.layer.backward(entry.tops, entry.bottom_need_backward, entry.bottoms)
        backend.synchronize()
        backward_layer[i] += clock.perf_counter() - start


def _report(entries, forward_layer, backward_layer, forward_total, backward_total, total,
            iterations):
    LOG.info("Average time per layer: ")
    for i, entry in enumerate(entries):
        LOG.info(f"{entry.name:>10}\tforward: {_ms(forward_layer[i]) / iterations:g} ms.")
        LOG.info(f"{entry.name:>10}\tbackward: {_ms(backward_layer[i]) / iterations:g} ms.")
    total = _ms(total)
    LOG.info(f"Average Forward pass: {_ms(forward_total) / iterations:g} ms.")
    LOG.info(f"Average Backward pass: {_ms(backward_total) / iterations:g} ms.")
    LOG.info(f"Average Forward-Backward: {total / iterations:g} ms.")
    LOG.info(f"Total Time: {total:g} ms.")
    LOG.info("*** Benchmark ends ***")


def _ms(seconds):
    return seconds * 1000.0
