"""The inference plan on every deploy model in models/: outputs and changed layers within the
bounds pycaffe_cli/inference/accuracy.py states (raw-pixel and normal inputs), and blob memory
reused without clobbering a blob a later step still reads."""
import os

import numpy as np
import pytest

from pycaffe_cli.inference.plan import InferencePlan
from pycaffe_cli.inference.accuracy import LAYER_BOUND, NORMAL, OUTPUT_BOUND, PIXELS, \
    capture_bottoms, compared_blobs, deviation, fill_inputs, measure, random_weights, twin
from pycaffe_cli.inference.fold import find_chains
from pycaffe_cli.net.net import Net
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.io.prototxt import read_net_param
from tests.test_detection_models import SLOW as SLOW_DETECTORS, SSD_MODELS, model_path
from tests.test_models import DEPLOY, ROOT, small_batch

MODELS = sorted(name for name, path in DEPLOY.items()
                if os.path.exists(os.path.join(ROOT, "models", name, path)))
# The SSD detectors (scripts/make_ssd_models.py): compared on their DetectionOutput's inputs.
DETECTORS = [pytest.param(name, marks=pytest.mark.slow) if name in SLOW_DETECTORS else name
             for name in sorted(SSD_MODELS)]


def deploy_param(name):
    if name in SSD_MODELS:
        return read_net_param(model_path(name))
    return small_batch(name)


@pytest.mark.parametrize("name", MODELS + DETECTORS)
@pytest.mark.parametrize("inputs", [PIXELS, NORMAL])
def test_the_plan_stays_within_its_stated_bounds(name, inputs):
    outputs, layers = measure(deploy_param(name), inputs)
    assert max(outputs.values()) <= OUTPUT_BOUND, outputs
    assert max(layers.values(), default=0.0) <= LAYER_BOUND, layers


@pytest.mark.parametrize("name, blobs", [
    ("googlenet", ["prob", "loss3/classifier"]),
    # DetectionOutput's inputs, the class scores' Softmax input for its (flattened) output
    ("ssd_face_res10", ["mbox_loc", "mbox_conf_reshape", "mbox_priorbox"]),
])
def test_outputs_are_compared_before_a_softmax_and_a_detection_list(name, blobs):
    assert compared_blobs(Net(deploy_param(name), caffe_pb2.TEST)) == blobs


@pytest.mark.parametrize("name", MODELS)
def test_the_plan_runs_every_deploy_model(name):
    param = small_batch(name)
    reference = Net(param, caffe_pb2.TEST)
    rng = np.random.default_rng(0)
    fill_inputs(reference, NORMAL, rng)
    random_weights(reference, rng)
    seen = capture_bottoms(reference)
    want = {reference.blob_names[i]: reference.blob_entries[i].blob.data.copy()
            for i in reference.output_blob_indices}
    keep = reference.blob_names[1:-1:7]
    kept = {blob_name: reference.blob_by_name(blob_name).data.copy() for blob_name in keep}
    outputs_protected = set(reference.output_blob_indices) | set(reference.input_blob_indices)
    all_chains = find_chains(reference, outputs_protected, fuse_relu=True)
    if name in ("resnet50", "mobilenet_v2"):
        convolutions = [c for c in all_chains if c.takes_affine]
        assert len(convolutions) == 53 and all(len(c.affine) == 2 for c in convolutions)
        # ResNet-50's 16 sums each feed a ReLU; MobileNet v2's (linear bottlenecks) do not
        sums = [c for c in all_chains if not c.takes_affine]
        assert len(sums) == (16 if name == "resnet50" else 0)
        assert all(reference.layers[c.producer].type == "Eltwise" for c in sums)
    net = twin(reference, param)
    plan = InferencePlan(net, keep=keep)
    folded = any(chain.affine for chain in plan.chains)
    check_each_step(plan, seen, folded)
    plan.forward()
    winograd = [step.layer.name for step in plan.steps
                if step.hooks.special_path() is not None]
    if name in ("googlenet", "squeezenet1.1", "resnet50", "alexnet", "caffenet"):
        assert winograd, name  # their 3x3 layers run Winograd, even at batch 1
    bound = OUTPUT_BOUND if folded or winograd else 0.0  # else the same computations
    for blob_name, values in list(want.items()) + list(kept.items()):
        # a blob whose buffer was reused too early would be far off
        assert deviation(net.blob_by_name(blob_name).data, values) <= bound, blob_name
    assert plan.memory.buffer_count < plan.memory.moved
    assert plan.memory.after_bytes < plan.memory.before_bytes
    convolutions = [s.layer for s in plan.steps if s.hooks.workspace_family == "convolution"]
    assert len({id(layer.cpu_backend) for layer in convolutions}) == 1  # one column buffer


def check_each_step(plan, seen, folded):
    """Step by step, every bottom holds what the plain net's layer read there (exactly
    where nothing was folded; folds move the last bits only, within the plan's bound): a
    buffer reused too early would hold another blob's values."""
    net = plan.net
    plan.prepare()
    for step in plan.steps:
        for blob, want in zip(step.bottoms, seen[step.at]):
            if folded:
                assert deviation(blob.data, want) <= OUTPUT_BOUND, net.layer_names[step.at]
            else:
                np.testing.assert_array_equal(blob.data, want, err_msg=net.layer_names[step.at])
        if step.full:
            step.layer.forward(step.bottoms, step.tops)
        else:
            step.layer.forward_pass()(step.bottoms, step.tops)
