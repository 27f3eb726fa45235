"""How far the inference plan's numbers lie from the plain net's, measured.

The metric, for a blob: ``deviation = max |plan - plain| / max |plain|``, both float32
results of the same net, weights and input. It is reported for each output blob (and the
input of a final Softmax, whose saturated outputs would hide differences; a detector's
DetectionOutput inputs in place of its detections), and for each layer the plan changes,
given the very input the plain layer read: each fold (a producer with the BatchNorm / Scale /
Bias layers after it) and each Winograd layer.

What is proven about those layers, for any input (docs/inference.md): a fold is the
producer's own GEMM over weights computed in float64 and rounded once, so it computes within
float32 rounding of the exact chain; a Winograd layer's error bound is at most
winograd_error.MAX_BOUND_RATIO times the GEMM's for its weights, or the layer runs the GEMM.
Through a whole net those per-layer differences grow with the net's own sensitivity, which
no bound on its layers can fix for every input; ``measure`` is what docs/benchmarks.md's
table and the tests run on every model in models/.
"""
import numpy as np

from pycaffe_cli.inference.plan import InferencePlan
from pycaffe_cli.net.net import Net
from pycaffe_cli.proto import caffe_pb2

# The bounds docs/inference.md states, and the tests hold every model in models/ to on every
# BLAS kernel: the worst deviations measured (scripts/plan_accuracy, docs/benchmarks.md) with
# a margin of a few times (docs/kernel-choices.md, "The inference plan's accuracy bounds").
OUTPUT_BOUND = 5e-4
LAYER_BOUND = 2e-5

PIXELS = "pixels"  # inputs: raw 8-bit pixel values, 0-255
NORMAL = "normal"  # inputs: standard normal values


def deviation(got, want):
    """max |got - want| / max |want| (0 when both are all zero)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = np.abs(want).max(initial=0.0)
    error = np.abs(got - want).max(initial=0.0)
    return error / scale if scale > 0 else (0.0 if error == 0 else float("inf"))


def fill_inputs(net, kind, rng):
    """Put ``kind`` values (PIXELS or NORMAL) into ``net``'s input blobs."""
    for blob in net.input_blobs:
        if kind == PIXELS:
            blob.data[...] = rng.integers(0, 256, blob.shape)
        else:
            blob.data[...] = rng.standard_normal(blob.shape)


def random_weights(net, rng):
    """Fill an engine ``net`` whose inputs hold data with random weights, as a trained net's
    would scale: He-scaled weights, small biases, Scale's gamma near 1; each BatchNorm's
    statistics those of the blob it normalizes for the current inputs (scale factor 1), so
    activations stay near unit scale after it. Runs the net forward on the way."""
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
    for entry in net.layer_entries:
        if entry.layer.type == "BatchNorm":
            seen = entry.bottoms[0].data
            axes = (0,) + tuple(range(2, seen.ndim))
            entry.layer.blobs[0].data[...] = seen.mean(axis=axes)
            entry.layer.blobs[1].data[...] = seen.var(axis=axes) + 1e-3
            entry.layer.blobs[2].data[...] = 1
        entry.layer.forward(entry.bottoms, entry.tops)


# Layers that only move values around: what a Softmax made stays its output through them.
_REARRANGING = ("Flatten", "Reshape")


def compared_blobs(net):
    """The output blobs, and the bottom of each Softmax whose top is an output (saturated
    probabilities would hide differences). For a DetectionOutput's output, its bottoms
    instead (a detection list is sorted by score: near-equal scores may swap rows), each
    made by a Softmax (through Flatten or Reshape) replaced by that Softmax's input: with
    random weights and raw pixels VGG-SSD300's logits reach 1,400, where a relative
    difference of 2e-6 moves a score by 4e-4 (docs/benchmarks.md, "Inference plan
    accuracy")."""
    producers = {net.blob_names[entry.top_ids[0]]: entry
                 for entry in net.layer_entries if entry.top_ids}
    names = []
    for index in net.output_blob_indices:
        name = net.blob_names[index]
        entry = producers.get(name)
        kind = entry.layer.type if entry is not None else None
        if kind == "DetectionOutput":
            names += [_before_softmax(net, producers, net.blob_names[i])
                      for i in entry.bottom_ids]
            continue
        names.append(name)
        if kind == "Softmax":
            names.append(net.blob_names[entry.bottom_ids[0]])
    return list(dict.fromkeys(names))


def _before_softmax(net, producers, name):
    """The input of the Softmax that made blob ``name`` (through Flatten or Reshape after
    it); ``name`` itself where no Softmax did."""
    entry = producers.get(name)
    while entry is not None and entry.layer.type in _REARRANGING:
        entry = producers.get(net.blob_names[entry.bottom_ids[0]])
    if entry is not None and entry.layer.type == "Softmax":
        return net.blob_names[entry.bottom_ids[0]]
    return name


def twin(net, param):
    """A second engine net of ``param`` with ``net``'s weights and inputs."""
    other = Net(param, caffe_pb2.TEST)
    for mine, theirs in zip(other.params, net.params):
        mine.data[...] = theirs.cpu_data
    for mine, theirs in zip(other.input_blobs, net.input_blobs):
        mine.data[...] = theirs.cpu_data
    return other


def _layer_deviations(reference, plan, seen):
    """{kind: worst deviation} of each changed layer ('fold', or the key of the special path
    its forward-only pass takes: 'winograd') given the input the plain net's layer read
    (``seen``: layer index -> its bottoms' values)."""
    worst = {}
    net = plan.net
    for step_index, step in enumerate(plan.steps):
        chain = next((c for c in plan.chains if c.producer == step.at), None)
        kinds = []
        if chain is not None and chain.affine:
            kinds.append("fold")
        path = step.hooks.special_path()
        if path is not None:
            kinds.append(path.key)
        if not kinds:
            continue
        for index in plan.step_layers(step_index):
            entry = reference.layer_entries[index]
            if index == step.at:
                entry.bottoms[0].data[...] = seen[index][0]
            entry.layer.forward(entry.bottoms, entry.tops)
        want = reference.blob_entries[step.top_ids[0]].blob.data
        bottom = net.layer_entries[step.at].bottoms[0]
        bottom.data[...] = seen[step.at][0]
        top = net.blob_entries[step.top_ids[0]].blob
        step.hooks.forward_pass()([bottom], [top])
        value = deviation(top.data, want)
        for kind in kinds:
            worst[kind] = max(worst.get(kind, 0.0), value)
    return worst


def capture_bottoms(net):
    """Run ``net`` forward; return {layer index: copies of its bottoms as it read them}."""
    seen = {}

    def before(index):
        seen[index] = [blob.data.copy() for blob in net.layer_entries[index].bottoms]
    net.add_callback("before_forward", before)
    net.forward()
    net.callbacks["before_forward"].remove(before)
    return seen


def measure(param, inputs=PIXELS, seed=0):
    """Deviations of the plan from the plain net ``param`` (TEST phase) with random weights
    (``random_weights``) on random ``inputs``: {blob name: deviation} for ``compared_blobs``,
    and {'fold' / 'winograd': the worst layer's deviation}."""
    rng = np.random.default_rng(seed)
    reference = Net(param, caffe_pb2.TEST)
    fill_inputs(reference, inputs, rng)
    random_weights(reference, rng)
    names = compared_blobs(reference)
    seen = capture_bottoms(reference)
    want = {name: reference.blob_by_name(name).data.copy() for name in names}
    net = twin(reference, param)
    plan = InferencePlan(net, keep=names)
    plan.forward()
    outputs = {name: deviation(net.blob_by_name(name).data, want[name]) for name in names}
    return outputs, _layer_deviations(reference, plan, seen)
