"""The inference plan (pycaffe_cli/inference/plan.py): folded and fused chains, shared blob memory,
and the cases where it must give way (TRAIN nets, backward, changed weights and shapes)."""
import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.inference.plan import InferencePlan
from pycaffe_cli.inference.accuracy import LAYER_BOUND, deviation
from pycaffe_cli.net.net import Net
from pycaffe_cli.proto import caffe_pb2
from tests.numerics import UNIT_ROUNDOFF

INPUT = 'layer { name: "data" type: "Input" top: "data" input_param { shape { %s } } }\n'
CONV_INPUT = INPUT % "dim: 2 dim: 4 dim: 5 dim: 5"
AFFINE = """
layer { name: "bn" type: "BatchNorm" bottom: "y" top: "y" batch_norm_param { eps: 1e-3 } }
layer { name: "scale" type: "Scale" bottom: "y" top: "y" scale_param { bias_term: true } }
layer { name: "bias" type: "Bias" bottom: "y" top: "y" }
layer { name: "relu" type: "ReLU" bottom: "y" top: "y" relu_param { negative_slope: %s } }
layer { name: "out" type: "Power" bottom: "y" top: "out" }
"""
PRODUCERS = {
    "conv": CONV_INPUT + 'layer { name: "p" type: "Convolution" bottom: "data" top: "y" '
                         'convolution_param { num_output: 6 kernel_size: 3 pad: 1 } }',
    "conv_nobias_grouped": CONV_INPUT + 'layer { name: "p" type: "Convolution" bottom: "data" '
                                        'top: "y" convolution_param { num_output: 6 group: 2 '
                                        'kernel_size: 3 bias_term: false } }',
    "deconv_grouped": CONV_INPUT + 'layer { name: "p" type: "Deconvolution" bottom: "data" '
                                   'top: "y" convolution_param { num_output: 6 group: 2 '
                                   'kernel_size: 2 stride: 2 } }',
    "ip": INPUT % "dim: 3 dim: 7" + 'layer { name: "p" type: "InnerProduct" bottom: "data" '
                                    'top: "y" inner_product_param { num_output: 6 } }',
    "ip_transposed": INPUT % "dim: 3 dim: 7" + 'layer { name: "p" type: "InnerProduct" '
                                               'bottom: "data" top: "y" inner_product_param '
                                               '{ num_output: 6 transpose: true } }',
}


def build(text, phase=caffe_pb2.TEST):
    return Net(text_format.Parse(text, caffe_pb2.NetParameter()), phase)


def fill_randomly(net, rng):
    """Random weights, random Scale/Bias operands and BatchNorm statistics with a scale
    factor other than 1; random inputs."""
    for layer in net.layers:
        if layer.type == "BatchNorm":
            layer.blobs[0].data[...] = rng.normal(0, 1, layer.blobs[0].shape) * 2.5
            layer.blobs[1].data[...] = rng.uniform(0.5, 2, layer.blobs[1].shape) * 2.5
            layer.blobs[2].data[...] = 2.5
        else:
            for blob in layer.blobs:
                blob.data[...] = rng.normal(0, 1, blob.shape)
    for blob in net.input_blobs:
        blob.data[...] = rng.normal(0, 1, blob.shape)


def copy_net(net, text):
    other = build(text)
    for mine, theirs in zip(other.params, net.params):
        mine.data[...] = theirs.cpu_data
    for mine, theirs in zip(other.input_blobs, net.input_blobs):
        mine.data[...] = theirs.cpu_data
    return other


def plan_deviation(net, plain):
    """The metric of the plan's stated bounds for the ``out`` blob (inference.accuracy)."""
    return deviation(net.blob_by_name("out").data, plain.blob_by_name("out").data)


# --- folding ---------------------------------------------------------------------------------
def test_a_conv_bn_scale_fold_is_the_hand_computed_one():
    text = PRODUCERS["conv"] + AFFINE % 0
    net = build(text)
    fill_randomly(net, np.random.default_rng(1))
    plan = InferencePlan(net)
    [chain] = plan.chains
    assert [net.layer_names[i] for i in chain.affine] == ["bn", "scale", "bias"]
    assert net.layer_names[chain.relu] == "relu"
    conv, bn, scale, bias = (net.layer_by_name(n) for n in ("p", "bn", "scale", "bias"))
    mean = bn.blobs[0].data.astype(np.float64) / 2.5
    var = bn.blobs[1].data.astype(np.float64) / 2.5
    a = scale.blobs[0].data / np.sqrt(var + np.float32(1e-3))
    b = (conv.blobs[1].data - mean) * a + scale.blobs[1].data + bias.blobs[0].data
    # computed in float64 and rounded once: within half an ulp of the float64 product
    np.testing.assert_allclose(chain.layer.blobs[0].data,
                               conv.blobs[0].data * a[:, None, None, None],
                               rtol=UNIT_ROUNDOFF * (1 + 1e-9))
    np.testing.assert_allclose(chain.layer.blobs[1].data, b, rtol=1e-6, atol=1e-6)
    assert chain.layer.inference().fused_relu_slope == 0
    # the net's own layers are untouched
    assert len(conv.blobs) == 2 and conv.inference().fused_relu_slope is None


@pytest.mark.parametrize("producer", sorted(PRODUCERS))
@pytest.mark.parametrize("slope", [0, 0.25])
def test_folded_chains_give_the_plain_outputs(producer, slope, engine):
    text = PRODUCERS[producer] + AFFINE % slope
    net = build(text)
    fill_randomly(net, np.random.default_rng(2))
    plain = copy_net(net, text)
    plain.forward()
    plan = InferencePlan(net)
    [chain] = plan.chains
    assert len(chain.affine) == 3
    assert (chain.relu is not None) == (engine == "cpu")  # the GPU runs its ReLU kernel
    plan.forward()
    want, got = plain.blob_by_name("out").cpu_data, net.blob_by_name("out").cpu_data
    assert deviation(got, want) <= LAYER_BOUND
    assert len(plan.steps) == len(net.layer_entries) - (4 if engine == "cpu" else 3)


STANDALONE = INPUT % "dim: 2 dim: 6 dim: 3 dim: 4" + """
layer { name: "p" type: "Power" bottom: "data" top: "y" power_param { shift: 0.5 } }
""" + AFFINE


@pytest.mark.parametrize("slope", [0, 0.25])
def test_affine_layers_after_no_producer_run_as_one_scale_step(slope, engine):
    """A BatchNorm, Scale and Bias with nothing to fold into (a BatchNorm after a sum, or on
    the input) run as one Scale layer of the folded (a, b), the ReLU after them fused on the
    CPU; its operands follow the weights."""
    text = STANDALONE % slope
    net = build(text)
    fill_randomly(net, np.random.default_rng(4))
    plan = InferencePlan(net)
    [chain] = plan.chains
    assert chain.standalone and chain.layer.type == "Scale"
    assert [net.layer_names[i] for i in chain.affine] == ["bn", "scale", "bias"]
    assert (chain.relu is not None) == (engine == "cpu")
    bn, scale, bias = (net.layer_by_name(n) for n in ("bn", "scale", "bias"))
    mean = bn.blobs[0].data.astype(np.float64) / 2.5
    var = bn.blobs[1].data.astype(np.float64) / 2.5
    a = scale.blobs[0].data / np.sqrt(var + np.float32(1e-3))
    b = -mean * a + scale.blobs[1].data + bias.blobs[0].data
    np.testing.assert_allclose(chain.layer.blobs[0].data, a, rtol=UNIT_ROUNDOFF * (1 + 1e-9))
    np.testing.assert_allclose(chain.layer.blobs[1].data, b, rtol=1e-6, atol=1e-6)
    assert len(plan.steps) == len(net.layer_entries) - (3 if engine == "cpu" else 2)
    assert "into 1 Scale layers" in plan.summary()
    for _ in range(2):  # then with a BatchNorm statistic changed
        plain = copy_net(net, text)
        plain.forward()
        plan.forward()
        assert plan_deviation(net, plain) <= LAYER_BOUND
        bn.blobs[0].data[...] += 1


def test_a_lone_batch_norm_runs_as_a_scale_but_a_lone_scale_stays():
    text = INPUT % "dim: 2 dim: 3 dim: 4" + """
        layer { name: "bn" type: "BatchNorm" bottom: "data" top: "n" }
        layer { name: "scale" type: "Scale" bottom: "n" top: "s" }
        layer { name: "out" type: "Power" bottom: "n" top: "out" }
        """
    net = build(text)
    fill_randomly(net, np.random.default_rng(5))
    plain = copy_net(net, text)
    plain.forward()
    plan = InferencePlan(net, keep=["s"])
    [chain] = plan.chains  # the Scale reads a blob another layer reads too
    assert [net.layer_names[i] for i in chain.affine] == ["bn"] and chain.relu is None
    plan.forward()
    for name in ("s", "out"):
        assert deviation(net.blob_by_name(name).data, plain.blob_by_name(name).data) \
            <= LAYER_BOUND


def test_a_chain_skips_blobs_only_when_nothing_else_needs_them():
    """Not in place (MobileNet's conv -> bn -> scale): the conv's own top is skipped unless
    it is kept, and then the BatchNorm and Scale make a chain of their own; a link whose
    bottom has another reader ends the chain."""
    text = CONV_INPUT + """
        layer { name: "c" type: "Convolution" bottom: "data" top: "c"
                convolution_param { num_output: 4 kernel_size: 1 } }
        layer { name: "bn" type: "BatchNorm" bottom: "c" top: "c/bn" }
        layer { name: "scale" type: "Scale" bottom: "c/bn" top: "c/bn" }
        layer { name: "relu" type: "ReLU" bottom: "c/bn" top: "r" }
        layer { name: "other" type: "Power" bottom: "c/bn" top: "o" }
        """
    net = build(text)
    fill_randomly(net, np.random.default_rng(3))
    [chain] = InferencePlan(net).chains
    assert [net.blob_names[i] for i in chain.skipped] == ["c"]
    assert chain.relu is None and net.blob_names[chain.top_id] == "c/bn"
    net = build(text)
    fill_randomly(net, np.random.default_rng(3))
    plain = copy_net(net, text)
    plain.forward()
    plan = InferencePlan(net, keep=["c"])
    [chain] = plan.chains
    assert chain.standalone and [net.layer_names[i] for i in chain.affine] == ["bn", "scale"]
    assert chain.relu is None and net.blob_names[chain.top_id] == "c/bn"
    plan.forward()
    for name in ("c", "o", "r"):
        got, want = net.blob_by_name(name).data, plain.blob_by_name(name).data
        assert deviation(got, want) <= LAYER_BOUND


RESIDUAL = INPUT % "dim: 2 dim: 3 dim: 4 dim: 5" + """
layer { name: "a" type: "Power" bottom: "data" top: "a" power_param { scale: -1 shift: 0.5 } }
layer { name: "sum" type: "Eltwise" bottom: "data" bottom: "a" top: "s"
        eltwise_param { operation: %s } }
layer { name: "relu" type: "ReLU" bottom: "s" top: "%s" relu_param { negative_slope: %s } }
layer { name: "out" type: "Power" bottom: "%s" top: "out" }
"""


def residual(operation="SUM", slope=0, in_place=True):
    top = "s" if in_place else "r"
    return RESIDUAL % (f"{operation} coeff: 1 coeff: 2" if operation == "SUM" else operation,
                       top, slope, top)


@pytest.mark.parametrize("operation", ["SUM", "PROD", "MAX"])
@pytest.mark.parametrize("slope, in_place", [(0, True), (0.25, True), (0, False)])
def test_an_eltwise_runs_the_relu_after_it(operation, slope, in_place, engine):
    """Eltwise then ReLU (ResNet's sum): one step on the CPU, whose top is the ReLU's."""
    text = residual(operation, slope, in_place)
    net = build(text)
    fill_randomly(net, np.random.default_rng(9))
    plain = copy_net(net, text)
    plain.forward()
    plan = InferencePlan(net)
    if engine == "cpu":
        [chain] = plan.chains
        assert net.layer_names[chain.relu] == "relu" and chain.affine == []
        assert chain.layer.inference().fused_relu_slope == slope
        assert net.layer_by_name("sum").inference().fused_relu_slope is None
        assert [net.blob_names[i] for i in chain.skipped] == ([] if in_place else ["s"])
        assert "fused 1 ReLU layers" in plan.summary()
    else:
        assert plan.chains == []
    plan.forward()
    # the same float32 operations in the same order as the plain layers'
    np.testing.assert_array_equal(net.blob_by_name("out").cpu_data,
                                  plain.blob_by_name("out").cpu_data)


def test_an_eltwise_chain_takes_no_affine_layer_and_keeps_what_others_read():
    text = INPUT % "dim: 2 dim: 3" + """
        layer { name: "sum" type: "Eltwise" bottom: "data" bottom: "data" top: "s" }
        layer { name: "scale" type: "Scale" bottom: "s" top: "s"
                scale_param { num_axes: 0 } }
        layer { name: "sum2" type: "Eltwise" bottom: "s" bottom: "data" top: "t" }
        layer { name: "relu" type: "ReLU" bottom: "t" top: "r" }
        layer { name: "other" type: "Power" bottom: "t" top: "o" }
        """
    net = build(text)
    fill_randomly(net, np.random.default_rng(10))
    assert InferencePlan(net).chains == []


# --- when the plan must give way --------------------------------------------------------------
def test_train_nets_are_refused():
    with pytest.raises(CaffeError, match="TEST-phase nets only"):
        InferencePlan(build(PRODUCERS["conv"] + AFFINE % 0, caffe_pb2.TRAIN))


def test_unknown_kept_blobs_are_refused():
    with pytest.raises(CaffeError, match='no blob named "nope"'):
        InferencePlan(build(PRODUCERS["conv"] + AFFINE % 0), keep=["nope"])


def test_backward_is_refused_until_the_plan_is_released():
    text = PRODUCERS["conv"] + AFFINE % 0 + "force_backward: true\n"
    net = build(text)
    fill_randomly(net, np.random.default_rng(4))
    plan = InferencePlan(net)
    plan.forward()
    with pytest.raises(CaffeError, match="inference plan"):
        net.backward()
    plan.release()
    net.forward()
    net.blob_by_name("out").diff[...] = 1
    net.backward()
    assert np.abs(net.blob_by_name("data").diff).sum() > 0


def test_changed_weights_are_folded_again():
    text = PRODUCERS["conv"] + AFFINE % 0
    net = build(text)
    rng = np.random.default_rng(5)
    fill_randomly(net, rng)
    plan = InferencePlan(net)
    plan.forward()

    def check():
        plain = copy_net(net, text)
        plain.forward()
        plan.forward()
        assert plan_deviation(net, plain) <= LAYER_BOUND

    net.layer_by_name("bn").blobs[0].data[...] += 3        # an accessor write: followed
    check()
    weights = net.layer_by_name("p").blobs[0]
    weights.share_data(_blob_like(weights, rng))            # new memory: followed
    check()
    held = net.layer_by_name("scale").blobs[0].data          # a view kept from before ...
    plan.forward()
    held[...] = 7                                            # ... written without an accessor
    plan.refold()                                            # needs refold() (documented)
    check()


def _blob_like(blob, rng):
    from pycaffe_cli.blob import Blob
    other = Blob(blob.shape)
    other.data[...] = rng.normal(0, 1, blob.shape)
    return other


def test_new_input_shapes_reshape_and_replan(engine):
    text = PRODUCERS["conv"] + AFFINE % 0
    net = build(text)
    fill_randomly(net, np.random.default_rng(6))
    plan = InferencePlan(net)
    plan.forward()
    net.input_blobs[0].reshape((3, 4, 7, 6))
    net.input_blobs[0].data[...] = np.random.default_rng(7).normal(0, 1, (3, 4, 7, 6))
    plain = copy_net(net, text.replace("dim: 2 dim: 4 dim: 5 dim: 5",
                                       "dim: 3 dim: 4 dim: 7 dim: 6"))
    plain.forward()
    plan.forward()
    assert net.blob_by_name("out").shape == (3, 6, 7, 6)
    assert plan_deviation(net, plain) <= LAYER_BOUND


def test_a_mode_change_rebuilds_the_plan(gpu_mode):
    text = PRODUCERS["conv"] + AFFINE % 0
    backend.set_mode_cpu()
    net = build(text)
    fill_randomly(net, np.random.default_rng(8))
    plan = InferencePlan(net)
    assert plan.chains[0].relu is not None
    plain = copy_net(net, text)
    plain.forward()
    backend.set_mode_gpu(0)
    plan.forward()
    assert plan.chains[0].relu is None
    assert plan_deviation(net, plain) <= LAYER_BOUND


def test_layers_whose_shapes_follow_the_data_still_reshape():
    """Filter's top size is the selector's count of nonzeros: the layers after it reshape
    whenever it changes, though the plan skips their reshape otherwise."""
    text = (INPUT % "dim: 4 dim: 3") + """
        layer { name: "sel" type: "Input" top: "sel" input_param { shape { dim: 4 } } }
        layer { name: "f" type: "Filter" bottom: "data" bottom: "sel" top: "f" }
        layer { name: "ip" type: "InnerProduct" bottom: "f" top: "ip"
                inner_product_param { num_output: 2 } }
        layer { name: "relu" type: "ReLU" bottom: "ip" top: "ip" }
        """
    net = build(text)
    fill_randomly(net, np.random.default_rng(9))
    plan = InferencePlan(net)
    for selector in ([1, 0, 1, 1], [0, 1, 0, 0], [1, 1, 1, 1]):
        net.blob_by_name("sel").data[...] = selector
        plain = copy_net(net, text)
        plain.forward()
        plan.forward()
        np.testing.assert_array_equal(net.blob_by_name("ip").data,
                                      plain.blob_by_name("ip").data)


def test_reshape_runs_only_when_shapes_change(monkeypatch):
    """Caffe reshapes every layer at every forward; the plan only when an input's shape (or
    a data-dependent layer's output shape) changed."""
    text = PRODUCERS["conv"] + AFFINE % 0
    net = build(text)
    fill_randomly(net, np.random.default_rng(10))
    power = type(net.layer_by_name("out"))
    calls = []
    original = power.reshape

    def counting(self, bottom, top):
        calls.append(self.name)
        original(self, bottom, top)
    monkeypatch.setattr(power, "reshape", counting)
    plan = InferencePlan(net)
    calls.clear()
    for _ in range(3):
        plan.forward()
    assert calls == []
    net.input_blobs[0].reshape((1, 4, 5, 5))
    plan.forward()
    assert calls and set(calls) == {"out"}
    assert net.blob_by_name("out").shape == (1, 6, 5, 5)


WINOGRAD_NET = (INPUT % "dim: 2 dim: 32 dim: 16 dim: 16") + """
layer { name: "p" type: "Convolution" bottom: "data" top: "y"
        convolution_param { num_output: 32 kernel_size: 3 pad: 1 } }
layer { name: "relu" type: "ReLU" bottom: "y" top: "y" }
layer { name: "out" type: "Power" bottom: "y" top: "out" }
"""


def test_winograd_layers_are_reported_and_follow_refold():
    net = build(WINOGRAD_NET)
    fill_randomly(net, np.random.default_rng(8))
    plan = InferencePlan(net)
    assert "ran 1 Convolution layers as Winograd F(4x4, 3x3)" in plan.summary()

    def check():
        plain = copy_net(net, WINOGRAD_NET)
        plain.forward()
        plan.forward()
        assert plan_deviation(net, plain) <= LAYER_BOUND

    check()
    held = net.layer_by_name("p").blobs[0].data   # a view kept from before ...
    plan.forward()
    held[...] *= -1                               # ... written without an accessor
    plan.refold()                                 # drops the transformed weights too
    check()
    held[...] *= 2
    plan = InferencePlan(net)                     # and so does a new plan
    check()


def concat_net(batch, extra=""):
    """Two convolution branches (too small for Winograd) joined by a Concat, then a Power."""
    return (INPUT % f"dim: {batch} dim: 3 dim: 6 dim: 6") + """
layer { name: "a" type: "Convolution" bottom: "data" top: "a"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 } }
layer { name: "b" type: "Convolution" bottom: "data" top: "b"
        convolution_param { num_output: 5 kernel_size: 1 } }
layer { name: "relu_b" type: "ReLU" bottom: "b" top: "b" }
layer { name: "cat" type: "Concat" bottom: "a" bottom: "b" top: "cat" }
layer { name: "out" type: "Power" bottom: "cat" top: "out" power_param { shift: 1 } }
""" + extra


def run_against_plain(text, monkeypatch, copies_expected):
    net = build(text)
    fill_randomly(net, np.random.default_rng(3))
    plain = copy_net(net, text)
    plain.forward()
    plan = InferencePlan(net)
    copies = []
    concat = net.layer_by_name("cat")
    original = concat.forward_cpu
    monkeypatch.setattr(concat, "forward_cpu", lambda b, t: copies.append(1) or original(b, t))
    plan._build()  # pick up the patched method
    plan.forward()
    assert bool(copies) == copies_expected
    np.testing.assert_array_equal(net.blob_by_name("out").data, plain.blob_by_name("out").data)
    return plan


def test_a_concat_of_one_image_copies_nothing(monkeypatch):
    plan = run_against_plain(concat_net(1), monkeypatch, copies_expected=False)
    assert len(plan.memory.joined) == 1
    assert "1 Concat layers copy nothing" in plan.summary()
    net = plan.net
    top = net.blob_by_name("cat").data_memory
    assert [net.blob_by_name(n).data_memory.parent for n in "ab"] == [top, top]
    plan.release()  # the bottoms get memory of their own again
    assert not hasattr(net.blob_by_name("a").data_memory, "parent")
    net.forward()
    assert net.blob_by_name("out").data.shape == (1, 9, 6, 6)


def test_concats_that_must_copy(monkeypatch):
    run_against_plain(concat_net(2), monkeypatch, copies_expected=True)  # images interleave
    later_reader = concat_net(1, 'layer { name: "again" type: "Power" bottom: "a" top: "z" }')
    plan = run_against_plain(later_reader, monkeypatch, copies_expected=True)
    assert not plan.memory.joined
    split = concat_net(1, 'layer { name: "other" type: "Power" bottom: "b" top: "w" }')
    assert not run_against_plain(split, monkeypatch, copies_expected=True).memory.joined


def test_a_new_batch_size_joins_and_unjoins(monkeypatch):
    net = build(concat_net(1))
    fill_randomly(net, np.random.default_rng(4))
    plan = InferencePlan(net)
    assert plan.memory.joined
    data = net.blob_by_name("data")
    data.reshape((2, 3, 6, 6))
    data.data[...] = np.random.default_rng(5).normal(size=data.shape)
    plan.forward()
    assert not plan.memory.joined
    plain = copy_net(net, concat_net(2))
    plain.forward()
    np.testing.assert_array_equal(net.blob_by_name("out").data, plain.blob_by_name("out").data)


CHAIN = (INPUT % "dim: 1 dim: 3 dim: 6 dim: 6") + """
layer { name: "c" type: "Convolution" bottom: "data" top: "c"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 } }
layer { name: "p1" type: "Power" bottom: "c" top: "h1" power_param { shift: 1 } }
layer { name: "p2" type: "Power" bottom: "h1" top: "h2" power_param { scale: 2 } }
layer { name: "p3" type: "Power" bottom: "h2" top: "out" power_param { shift: -1 } }
"""


def own_buffer_bytes(plan):
    """What the plan's classes take with a buffer each."""
    net = plan.net
    return 4 * sum(max(net.blob_entries[i].blob.count() for i in members)
                   for _, _, members in plan.memory.classes)


@pytest.mark.parametrize("room", [0, -1])
def test_buffers_are_reused_only_where_their_own_would_pass_the_limit(room, monkeypatch):
    """Each class gets a buffer of its own while all of them take at most the limit (a
    reused buffer's lines move between the cores), else they share; the outputs are the
    plain net's either way."""
    from pycaffe_cli.inference import memory
    net = build(CHAIN)
    fill_randomly(net, np.random.default_rng(6))
    plain = copy_net(net, CHAIN)
    plain.forward()
    size = own_buffer_bytes(InferencePlan(copy_net(net, CHAIN)))
    monkeypatch.setattr(memory, "own_buffers_limit", lambda: size + room)
    plan = InferencePlan(net)
    summary, first = plan.summary(), (plan.memory.reused, plan.memory.buffer_count)
    plan.forward()
    np.testing.assert_array_equal(net.blob_by_name("out").data, plain.blob_by_name("out").data)
    classes = len(plan.memory.classes)
    assert classes == 3  # c, h1, h2; the output keeps its own memory
    if room == 0:  # buffers of their own for the first pass; then the layout trial goes on
        assert plan.memory.both and first == (False, classes)
        assert ("3 blobs in 3 buffers of their own until passes timed each way show whether "
                "shared ones run faster" in summary)
    else:
        assert plan.memory.reused and plan.memory.buffer_count == 2  # h2 takes c's buffer
        assert "3 blobs share 2 buffers" in plan.summary()


class PassClock:
    """A stand-in for the plan's perf_counter: every reading moves on by what a pass in the
    plan's current layout costs, so a pass (two readings) takes exactly that."""

    def __init__(self, own, shared):
        self.costs, self.now, self.plan = {False: own, True: shared}, 0.0, None

    def __call__(self):
        self.now += self.costs[self.plan.memory.reused]
        return self.now


def trial_plan(text, own, shared, monkeypatch):
    """(plan, plain net, clock) on ``text`` with random weights, buffers of their own
    allowed, and passes that take ``own`` / ``shared`` seconds by the plan's clock."""
    from pycaffe_cli.inference import memory, plan as plan_module
    net = build(text)
    fill_randomly(net, np.random.default_rng(8))
    plain = copy_net(net, text)
    plain.forward()
    monkeypatch.setattr(memory, "own_buffers_limit", lambda: 1 << 40)
    clock = PassClock(own, shared)
    monkeypatch.setattr(plan_module, "perf_counter", clock)
    clock.plan = InferencePlan(net)
    return clock.plan, plain, clock


@pytest.mark.parametrize("own, shared", [(2.0, 1.0), (1.0, 2.0), (1.0, 1.0)])
def test_the_plan_keeps_the_blob_layout_its_passes_ran_faster_in(own, shared, monkeypatch,
                                                                 caplog):
    """Where buffers of their own are allowed, the first passes run in each layout in turn
    (one untimed pass each, then TRIAL_PASSES timed ones each) and the plan keeps the one
    with the lower median (their own on a tie); every pass gives the plain net's outputs,
    Concat views and Split tops following the blobs from layout to layout."""
    import logging
    from pycaffe_cli.inference.plan import TRIAL_PASSES
    text = concat_net(1, """
layer { name: "twice" type: "Power" bottom: "out" top: "h" power_param { scale: 2 } }
layer { name: "fork" type: "Split" bottom: "h" top: "h1" top: "h2" }
layer { name: "end1" type: "Power" bottom: "h1" top: "end1" power_param { shift: 1 } }
layer { name: "end2" type: "Power" bottom: "h2" top: "end2" power_param { shift: 2 } }""")
    plan, plain, _ = trial_plan(text, own, shared, monkeypatch)
    layouts = []
    with caplog.at_level(logging.INFO, logger="pycaffe"):
        for _ in range(2 + 2 * TRIAL_PASSES + 2):
            layouts.append(plan.memory.reused)
            plan.forward()
            for name in ("end1", "end2"):
                np.testing.assert_array_equal(plan.net.blob_by_name(name).data,
                                              plain.blob_by_name(name).data)
    keeps_shared = shared < own
    assert layouts == [False, True] * (1 + TRIAL_PASSES) + [keeps_shared] * 2
    assert not plan.memory.both and plan.memory.reused == keeps_shared
    # cat (a and b its views), out, h (h1 and h2 its Split's); h takes cat's buffer shared
    assert len(plan.memory.classes) == 3
    assert plan.memory.buffer_count == (2 if keeps_shared else 3)
    kept = "share buffers" if keeps_shared else "keep buffers of their own"
    assert (f"Inference plan: blobs {kept} (passes took {own * 1e3:.2f} ms with buffers of "
            f"their own, {shared * 1e3:.2f} ms with shared ones: medians of {TRIAL_PASSES} "
            "each)") in caplog.text
    assert "blobs share" in plan.summary() if keeps_shared else "none reused" in plan.summary()
    top = plan.net.blob_by_name("cat").data_memory
    assert [plan.net.blob_by_name(n).data_memory.parent for n in "ab"] == [top, top]


def test_new_input_shapes_try_both_layouts_again(monkeypatch):
    """A reshape for new input shapes sizes new buffers, so the trial runs again on them."""
    from pycaffe_cli.inference.plan import TRIAL_PASSES
    plan, _, clock = trial_plan(CHAIN, 2.0, 1.0, monkeypatch)
    for _ in range(2 + 2 * TRIAL_PASSES):
        plan.forward()
    assert plan.memory.reused and not plan.memory.both
    plan.net.input_blobs[0].reshape((2, 3, 6, 6))
    plan.net.input_blobs[0].data[...] = 1
    clock.costs = {False: 1.0, True: 2.0}
    plan.forward()
    assert plan.memory.both and plan.memory.reused  # the new trial's second pass: shared
    for _ in range(1 + 2 * TRIAL_PASSES):
        plan.forward()
    assert not plan.memory.reused and not plan.memory.both


def test_no_trial_keeps_buffers_of_their_own(monkeypatch):
    """TRIAL_PASSES = 0: no pass is timed; blobs keep buffers of their own where allowed."""
    from pycaffe_cli.inference import plan as plan_module
    monkeypatch.setattr(plan_module, "TRIAL_PASSES", 0)
    plan, plain, _ = trial_plan(CHAIN, 2.0, 1.0, monkeypatch)
    for _ in range(4):
        plan.forward()
        assert not plan.memory.reused and not plan.memory.both
    np.testing.assert_array_equal(plan.net.blob_by_name("out").data,
                                  plain.blob_by_name("out").data)


def test_the_gpu_reuses_buffers_whatever_the_limit(gpu_mode, monkeypatch):
    from pycaffe_cli.inference import memory
    monkeypatch.setattr(memory, "own_buffers_limit", lambda: 1 << 40)
    plan = InferencePlan(build(CHAIN))
    assert plan.memory.reused and plan.memory.buffer_count == 2


@pytest.mark.parametrize("machine, limit", [(16 << 30, 1 << 30), (None, 0)])
def test_own_buffers_take_a_sixteenth_of_memory(machine, limit, monkeypatch):
    from pycaffe_cli.inference import memory
    monkeypatch.undo()  # conftest's plans_reuse_buffers
    monkeypatch.setattr(memory, "physical_memory", lambda: machine)
    assert memory.own_buffers_limit() == limit
