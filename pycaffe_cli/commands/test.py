"""``pycaffe test``: score a model (Caffe's ``test()`` in tools/caffe.cpp).

Sums are kept in float32, as Caffe's ``float`` accumulators are, so the printed means match
Caffe's digit for digit; numbers print as C++ streams print them (``%g``).

Outputs of DetectionEvaluate layers (SSD's fork) are scored as the fork's solver scores them
with eval_type "detection": their rows are gathered over the iterations and each such output
prints its per-class average precisions and its mean (pycaffe_cli/detection/
average_precision.py) instead of per-element means, which mean nothing for those rows.
"""
import click
import numpy as np

from pycaffe_cli.commands import split_list, subcommand
from pycaffe_cli.commands.common import require, use_single_device
from pycaffe_cli.commands.non_finite import NonFiniteWatch
from pycaffe_cli.detection.average_precision import (AP_VERSIONS, DetectionResults,
                                                     check_result_blob)
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG

DETECTION_FLAGS = {
    "ap_version": dict(default="Integral", type=click.Choice(AP_VERSIONS), show_default=True,
                       help="A pycaffe addition (SSD's fork sets it in the solver): how "
                            "outputs of DetectionEvaluate layers are scored: '11point' "
                            "(VOC2007), 'MaxIntegral' (VOC2012, ILSVRC) or 'Integral' (the "
                            "default of SolverParameter.ap_version). Each such output prints "
                            "'class<label>: <AP>' per class and '<name> = <mAP> "
                            "(<ap_version> mAP)'."),
}


@subcommand("test", summary="score a model",
            flags=("model", "weights", "iterations", "gpu", "level", "stage", "inference_plan"),
            own_flags=DETECTION_FLAGS)
def test(model, weights, iterations, gpu, level, stage, inference_plan, ap_version):
    """Score a trained model: run --iterations forward passes of the TEST-phase net and
    log each output per batch and their means (through an inference plan: see the flag).
    Outputs of DetectionEvaluate layers (SSD) are gathered over the batches instead and
    scored by mean average precision (see the ap_version flag)."""
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
    detection = _detection_outputs(net)
    loss, scores, score_output, results = _score(net, runner, iterations, detection)
    loss /= np.float32(iterations)
    LOG.info(f"Loss: {loss:g}")
    for score, output in zip(scores, score_output):
        entry = net.blob_entries[net.output_blob_indices[output]]
        name, weight = entry.name, np.float32(entry.loss_weight)
        mean = score / np.float32(iterations)
        suffix = f" (* {weight:g} = {weight * mean:g} loss)" if weight else ""
        LOG.info(f"{name} = {mean:g}{suffix}")
    for k, output in enumerate(detection):
        name = net.blob_entries[net.output_blob_indices[output]].name
        results.log(k, name, ap_version, show_per_class=True, suffix=f" ({ap_version} mAP)")
    return 0


def _detection_outputs(net):
    """The indices of the net's outputs that a DetectionEvaluate layer writes."""
    tops = {blob_id for entry in net.layer_entries if entry.layer.type == "DetectionEvaluate"
            for blob_id in entry.top_ids}
    return [j for j, blob_id in enumerate(net.output_blob_indices) if blob_id in tops]


def _score(net, runner, iterations, detection):
    """Run the forwards (``runner``: the net or its inference plan); return the summed
    loss, per-element score sums, their outputs, and the rows of the ``detection`` outputs
    gathered (DetectionResults, one entry per output of ``detection``)."""
    loss = np.float32(0)
    scores, score_output = None, []
    results = DetectionResults(len(detection))
    watch = NonFiniteWatch(net, "Testing")
    for i in range(iterations):
        batch_loss = np.float32(runner.forward())
        watch.check(batch_loss, f"Batch {i}")
        loss += batch_loss
        values = []
        for j, blob_id in enumerate(net.output_blob_indices):
            entry = net.blob_entries[blob_id]
            if j in detection:
                check_result_blob(entry.blob.shape, entry.name, "pycaffe test")
                results.add(detection.index(j), entry.blob.cpu_data)
                continue
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
    return loss, scores, score_output, results
