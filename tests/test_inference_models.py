"""The inference plan on every deploy model in models/: the same outputs as the plain net,
every chain within 1e-5 relative, and blob memory reused without clobbering a blob a later
step still reads."""
import os

import numpy as np
import pytest

from pycaffe_cli.inference import InferencePlan
from pycaffe_cli.inference_fold import find_chains
from pycaffe_cli.net import Net
from pycaffe_cli.proto import caffe_pb2
from tests.test_models import DEPLOY, ROOT, small_batch

MODELS = sorted(name for name, path in DEPLOY.items()
                if os.path.exists(os.path.join(ROOT, "models", name, path)))


def random_weights(net, rng):
    """He-scaled weights, small biases, Scale's gamma near 1; each BatchNorm's statistics
    those of the blob it normalizes on the net's random input (scale factor 1), so that
    activations stay near unit scale, as in a trained net."""
    for layer in net.layers:
        if layer.type == "Scale":
            layer.blobs[0].data[...] = rng.uniform(0.5, 1.5, layer.blobs[0].shape)
            for bias in layer.blobs[1:]:
                bias.data[...] = rng.normal(0, 0.1, bias.shape)
        elif layer.blobs and layer.type != "BatchNorm":
            weights = layer.blobs[0].data
            weights[...] = rng.standard_normal(weights.shape, np.float32)
            weights *= np.float32(np.sqrt(2.0 / weights[0].size))
            for bias in layer.blobs[1:]:
                bias.data[...] = rng.normal(0, 0.1, bias.shape)
    for blob in net.input_blobs:
        blob.data[...] = rng.standard_normal(blob.shape)
    for entry in net.layer_entries:
        if entry.layer.type == "BatchNorm":
            seen = entry.bottoms[0].data
            axes = (0,) + tuple(range(2, seen.ndim))
            entry.layer.blobs[0].data[...] = seen.mean(axis=axes)
            entry.layer.blobs[1].data[...] = seen.var(axis=axes) + 1e-3
            entry.layer.blobs[2].data[...] = 1
        entry.layer.forward(entry.bottoms, entry.tops)


def twin(net, param):
    """A second net of ``param`` with ``net``'s weights and inputs."""
    other = Net(param, caffe_pb2.TEST)
    for mine, theirs in zip(other.params, net.params):
        mine.data[...] = theirs.cpu_data
    for mine, theirs in zip(other.input_blobs, net.input_blobs):
        mine.data[...] = theirs.cpu_data
    return other


def capture_bottoms(net):
    """Run ``net`` forward; return {layer index: copies of its bottoms as it read them}."""
    seen = {}

    def before(index):
        seen[index] = [blob.data.copy() for blob in net.layer_entries[index].bottoms]
    net.add_callback("before_forward", before)
    net.forward()
    net.callbacks["before_forward"].remove(before)
    return seen


def relative(got, want):
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def outputs(net):
    return {net.blob_names[i]: net.blob_entries[i].blob.data.copy()
            for i in net.output_blob_indices}


def float32_spread(net):
    """How far the outputs move when every weight moves by at most an ulp: what float32
    rounding alone makes uncertain in this net (relative to the largest output)."""
    want = outputs(net)
    saved = [blob.data.copy() for blob in net.params]
    rng = np.random.default_rng(1)
    for blob in net.params:
        blob.data[...] *= (1 + rng.uniform(-6e-8, 6e-8, blob.shape)).astype(np.float32)
    net.forward()
    moved = max(relative(net.blob_entries[i].blob.data, want[net.blob_names[i]])
                for i in net.output_blob_indices)
    for blob, values in zip(net.params, saved):
        blob.data[...] = values
    net.forward()
    return moved


@pytest.mark.parametrize("name", MODELS)
def test_the_plan_runs_every_deploy_model(name):
    param = small_batch(name)
    reference = Net(param, caffe_pb2.TEST)
    random_weights(reference, np.random.default_rng(0))
    seen = capture_bottoms(reference)
    want = outputs(reference)
    keep = reference.blob_names[1:-1:7]
    values = {blob_name: reference.blob_by_name(blob_name).data.copy() for blob_name in keep}
    outputs_protected = set(reference.output_blob_indices) | set(reference.input_blob_indices)
    all_chains = find_chains(reference, outputs_protected, fuse_relu=True)
    if name in ("resnet50", "mobilenet_v2"):
        assert len(all_chains) == 53 and all(len(c.affine) == 2 for c in all_chains)
    net = twin(reference, param)
    plan = InferencePlan(net, keep=keep)
    folded = any(chain.affine for chain in plan.chains)
    check_each_step(plan, seen, folded)
    plan.forward()
    winograd = [step.layer.name for step in plan.steps
                if getattr(step.layer, "winograd_block", 0)]
    if name in ("googlenet", "squeezenet1.1", "resnet50", "alexnet", "caffenet"):
        assert winograd, name  # their 3x3 layers run Winograd, even at batch 1
    rounded = folded or bool(winograd)
    check_outputs(reference, net, want, rounded)
    for blob_name in keep:  # a blob whose buffer was reused would be far off
        got = net.blob_by_name(blob_name).data
        assert relative(got, values[blob_name]) <= (1e-3 if rounded else 0), blob_name
    check_each_chain(reference, net, plan, seen)
    assert plan.memory.buffer_count < plan.memory.moved
    assert plan.memory.after_bytes < plan.memory.before_bytes
    convolutions = [s.layer for s in plan.steps if s.layer.workspace_family == "convolution"]
    assert len({id(layer.cpu_backend) for layer in convolutions}) == 1  # one column buffer


def check_outputs(reference, net, want, rounded):
    """Within 1e-5 relative (of the largest output), or within what a one-ulp change of the
    weights alone moves this net's outputs, where that is more: ResNet-50's 53 folds each
    stay within 2e-6 (check_each_chain), and its Winograd layers within ~3e-6
    (tests/layers/test_winograd_convolution.py), but 50 random layers amplify any rounding
    difference, an ulp of the weights' as much as the folds'. Without a fold or a Winograd
    layer (``rounded`` False: ReLU fused, memory shared) the outputs are the same to the
    bit."""
    tolerance = max(1e-5, 4 * float32_spread(reference)) if rounded else 0
    for blob_name, values in want.items():
        assert relative(net.blob_by_name(blob_name).data, values) <= tolerance, blob_name


def check_each_chain(reference, net, plan, seen):
    """Each chain, given the input the plain net's producer read, writes what the plain
    producer, BatchNorm, Scale (and ReLU) write, within 1e-5 of the blob's range."""
    for chain in plan.chains:
        producer = reference.layer_entries[chain.producer]
        producer.bottoms[0].data[...] = seen[chain.producer][0]
        links = chain.affine + ([chain.relu] if chain.relu is not None else [])
        for index in [chain.producer] + links:
            entry = reference.layer_entries[index]
            entry.layer.forward(entry.bottoms, entry.tops)
        want = reference.blob_entries[chain.top_id].blob.data
        bottom = net.layer_entries[chain.producer].bottoms[0]
        bottom.data[...] = seen[chain.producer][0]
        top = net.blob_entries[chain.top_id].blob
        chain.layer.forward([bottom], [top])
        assert relative(top.data, want) < 1e-5, net.layer_names[chain.producer]


def check_each_step(plan, seen, folded):
    """Step by step, every bottom holds what the plain net's layer read there (exactly
    where nothing was folded; folds move the last bits only): a buffer reused too early
    would hold another blob's values."""
    net = plan.net
    plan.prepare()
    for step in plan.steps:
        for blob, want in zip(step.bottoms, seen[step.at]):
            if folded:
                assert relative(blob.data, want) < 1e-3, net.layer_names[step.at]
            else:
                np.testing.assert_array_equal(blob.data, want, err_msg=net.layer_names[step.at])
        if step.full:
            step.layer.forward(step.bottoms, step.tops)
        else:
            step.layer.forward_pass()(step.bottoms, step.tops)
