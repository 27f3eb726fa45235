"""``pycaffe test``: score a model (Caffe's ``test()`` in tools/caffe.cpp).

Sums are kept in float32, as Caffe's ``float`` accumulators are, so the printed means match
Caffe's digit for digit; numbers print as C++ streams print them (``%g``).
"""
import numpy as np

from pycaffe_cli.commands import split_list, subcommand
from pycaffe_cli.commands.common import require, use_single_device
from pycaffe_cli.commands.non_finite import NonFiniteWatch
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG


@subcommand("test", summary="score a model",
            flags=("model", "weights", "iterations", "gpu", "level", "stage", "inference_plan"))
def test(model, weights, iterations, gpu, level, stage, inference_plan):
    """Score a trained model: run --iterations forward passes of the TEST-phase net and
    log each output per batch and their means (through an inference plan: see the flag)."""
    require(model, "Need a model definition to score.")
    require(weights, "Need model weights to score.")
    stages = split_list(stage)
    use_single_device(gpu)
    from pycaffe_cli.net.net import Net
    from pycaffe_cli.net.weights import copy_trained_layers_from
    from pycaffe_cli.proto import caffe_pb2

    net = Net.from_file(model, caffe_pb2.TEST, level, stages)
    copy_trained_layers_from(net, weights)
    runner = net
    if inference_plan and not net.debug_info:  # debug_info logs every layer: run them all
        from pycaffe_cli.inference.plan import InferencePlan
        runner = InferencePlan(net)
        LOG.info(runner.summary())
    LOG.info(f"Running for {iterations} iterations.")
    loss, scores, score_output = _score(net, runner, iterations)
    loss /= np.float32(iterations)
    LOG.info(f"Loss: {loss:g}")
    for score, output in zip(scores, score_output):
        entry = net.blob_entries[net.output_blob_indices[output]]
        name, weight = entry.name, np.float32(entry.loss_weight)
        mean = score / np.float32(iterations)
        suffix = f" (* {weight:g} = {weight * mean:g} loss)" if weight else ""
        LOG.info(f"{name} = {mean:g}{suffix}")
    return 0


def _score(net, runner, iterations):
    """Run the forwards (``runner``: the net or its inference plan); return the summed
    loss, per-element score sums, their outputs."""
    loss = np.float32(0)
    scores, score_output = None, []
    watch = NonFiniteWatch(net, "Testing")
    for i in range(iterations):
        batch_loss = np.float32(runner.forward())
        watch.check(batch_loss, f"Batch {i}")
        loss += batch_loss
        values = []
        for j, blob_id in enumerate(net.output_blob_indices):
            entry = net.blob_entries[blob_id]
            for value in entry.blob.cpu_data.ravel():
                LOG.info(f"Batch {i}, {entry.name} = {value:g}")
                values.append(value)
                if i == 0:
                    score_output.append(j)
        values = np.array(values, dtype=np.float32)
        if scores is not None and values.shape != scores.shape:
            raise CaffeError(f"the net's outputs changed size between batches "
                             f"({scores.size} values, then {values.size}); cannot average them")
        scores = values if scores is None else scores + values
    return loss, scores, score_output
