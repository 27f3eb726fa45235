"""caffe.Net: BVLC's constructors, the OrderedDict views, forward/backward over layer ranges,
batched forward_all, weights in and out, NetState filtering, and the errors that name the
blob, layer or file."""
from collections import OrderedDict

import numpy as np
import pytest

import caffe
from tests.caffe_api.nets import DEPLOY_IP, conv_ip_loss
from tests.numerics import assert_product


def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.fixture
def net(write):
    net = caffe.Net(write("net.prototxt", conv_ip_loss()), caffe.TRAIN)
    net.blobs["label"].data[...] = (np.arange(5) % 13).reshape(5, 1, 1, 1)
    return net


@pytest.fixture
def deploy(write):
    return caffe.Net(write("deploy.prototxt", DEPLOY_IP), caffe.TEST)


def test_names_and_views(net):
    assert net.inputs == [] and net.outputs == ["loss"]
    assert list(net.blobs) == ["data", "label", "conv", "ip_blob", "loss"]
    assert list(net.params) == ["conv", "ip"]
    assert list(net.layer_dict) == list(net._layer_names) == ["data", "conv", "ip", "loss"]
    assert [layer.type for layer in net.layers] == ["DummyData", "Convolution",
                                                    "InnerProduct", "SoftmaxWithLoss"]
    assert net.top_names == OrderedDict([("data", ["data", "label"]), ("conv", ["conv"]),
                                         ("ip", ["ip_blob"]), ("loss", ["loss"])])
    assert net.bottom_names == OrderedDict([("data", []), ("conv", ["data"]),
                                            ("ip", ["conv"]), ("loss", ["ip_blob", "label"])])
    assert list(net._blob_names) == list(net.blobs)
    assert net._inputs == [] and net._outputs == [4]
    assert net.blob_loss_weights["loss"] == 1 and net.blob_loss_weights["conv"] == 0


def test_blob_view(net):
    conv = net.blobs["conv"]
    assert conv.shape == (5, 11, 8, 9) and conv.count == 5 * 11 * 8 * 9   # pad 3, kernel 2
    assert (conv.num, conv.channels, conv.height, conv.width) == (5, 11, 8, 9)
    weights, bias = net.params["conv"]
    assert weights.shape == (11, 2, 2, 2) and bias.shape == (11,)
    assert net.params["conv"][1].data.tolist() == [2.0] * 11   # the constant filler
    assert net.layers[1].blobs[0].data is not None


def test_blob_data_is_the_nets_memory(deploy):
    deploy.params["ip"][0].data[...] = 0
    deploy.params["ip"][1].data[...] = np.arange(5)
    out = deploy.forward(data=np.ones((4, 3, 2, 2)))
    np.testing.assert_allclose(out["prob"], softmax(np.tile(np.arange(5.0), (4, 1))),
                               rtol=1e-6)


def test_forward_returns_outputs_and_asked_blobs(deploy):
    x = np.random.default_rng(0).normal(size=(4, 3, 2, 2)).astype(np.float32)
    out = deploy.forward(blobs=["ip"], data=x)
    assert sorted(out) == ["ip", "prob"]
    w, b = (p.data for p in deploy.params["ip"])
    expected = x.reshape(4, -1) @ w.T + b
    np.testing.assert_allclose(out["ip"], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["prob"], softmax(expected), rtol=1e-5, atol=1e-7)


def test_forward_and_backward_between_layers(net):
    net.blobs["conv"].data[...] = np.random.default_rng(1).uniform(size=net.blobs["conv"].shape)
    conv = net.blobs["conv"].data.copy()
    out = net.forward(start="ip", end="ip")
    assert list(out) == ["ip_blob"]
    w, b = (p.data for p in net.params["ip"])
    assert_product(out["ip_blob"], conv.reshape(5, -1), w.T, addend=b)
    net.blobs["ip_blob"].diff[...] = np.random.default_rng(2).uniform(
        size=net.blobs["ip_blob"].shape)
    top_diff = net.blobs["ip_blob"].diff.copy()
    grads = net.backward(start="ip", end="ip")
    assert list(grads) == ["conv"]
    assert_product(grads["conv"].reshape(5, -1), top_diff, w)


def test_backward_from_the_loss(net):
    net.forward()
    net.backward()
    assert abs(net.params["conv"][0].diff).max() > 0
    net.clear_param_diffs()
    assert not net.params["conv"][0].diff.any()


def test_backward_with_top_diffs(write, engine):
    """Forward and backward through caffe.Net against numpy, with the net built on the host
    and, for the GPU engine, switched to the device with caffe.set_mode_gpu()."""
    caffe.set_mode_cpu()
    deploy = caffe.Net(write("fb.prototxt", "force_backward: true" + DEPLOY_IP), caffe.TEST)
    if engine == "gpu":
        caffe.set_mode_gpu()
    x = np.random.default_rng(3).normal(size=(4, 3, 2, 2))
    out = deploy.forward(data=x)
    w, b = (p.data.astype(np.float64) for p in deploy.params["ip"])
    ip = x.astype(np.float32).reshape(4, -1) @ w.T + b
    np.testing.assert_allclose(out["prob"], softmax(ip), rtol=1e-5, atol=1e-7)
    prob = deploy.blobs["prob"].data.copy()
    top = np.random.default_rng(4).normal(size=(4, 5))
    grads = deploy.backward(diffs=["ip"], prob=top)
    d_ip = prob * (top - (top * prob).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(grads["ip"], d_ip, rtol=1e-4, atol=1e-6)
    assert abs(grads["data"]).max() > 1e-3
    np.testing.assert_allclose(grads["data"], (d_ip @ w).reshape(x.shape), rtol=1e-4,
                               atol=1e-6)


def test_forward_all_splits_and_pads_batches(deploy):
    x = np.random.default_rng(5).normal(size=(10, 3, 2, 2)).astype(np.float32)
    out = deploy.forward_all(blobs=["ip"], data=x)
    assert out["prob"].shape == (10, 5) and out["ip"].shape == (10, 5)
    w, b = (p.data for p in deploy.params["ip"])
    np.testing.assert_allclose(out["ip"], x.reshape(10, -1) @ w.T + b, rtol=1e-5, atol=1e-6)


def test_forward_backward_all(deploy):
    x = np.random.default_rng(6).normal(size=(6, 3, 2, 2))
    top = np.ones((6, 5))
    outs, diffs = deploy.forward_backward_all(data=x, prob=top)
    assert outs["prob"].shape == (6, 5) and diffs["data"].shape == (6, 3, 2, 2)
    np.testing.assert_allclose(outs["prob"].sum(axis=1), 1, rtol=1e-6)
    # d(sum of softmax)/d(anything) is zero: every row of prob sums to one
    np.testing.assert_allclose(diffs["data"], 0, atol=1e-6)


def test_reshape_changes_the_batch(deploy):
    deploy.blobs["data"].reshape(2, 3, 2, 2)
    deploy.reshape()
    assert deploy.blobs["prob"].shape == (2, 5)
    assert deploy.forward(data=np.zeros((2, 3, 2, 2)))["prob"].shape == (2, 5)


def test_save_and_load_both_constructors(net, write, tmp_path):
    path = str(tmp_path / "w.caffemodel")
    net.save(path)
    model = write("again.prototxt", conv_ip_loss())
    legacy = caffe.Net(model, path, caffe.TRAIN)
    named = caffe.Net(model, caffe.TRAIN, weights=path)
    by_keywords = caffe.Net(model, phase=caffe.TRAIN, weights=path)
    for name, blobs in net.params.items():
        for mine, *others in zip(blobs, legacy.params[name], named.params[name],
                                 by_keywords.params[name]):
            assert all(np.array_equal(mine.data, other.data) for other in others)


def test_hdf5_weights_and_copy_from(net, write, tmp_path):
    path = str(tmp_path / "w.caffemodel.h5")
    net.save_hdf5(path)
    other = caffe.Net(write("again.prototxt", conv_ip_loss()), caffe.TRAIN)
    other.load_hdf5(path)
    assert np.array_equal(other.params["ip"][0].data, net.params["ip"][0].data)
    other.params["ip"][0].data[...] = 0
    other.copy_from(path)
    assert np.array_equal(other.params["ip"][0].data, net.params["ip"][0].data)


def test_share_with(net, write):
    other = caffe.Net(write("again.prototxt", conv_ip_loss()), caffe.TRAIN)
    other.share_with(net)
    net.params["ip"][0].data[...] = 7
    assert (other.params["ip"][0].data == 7).all()


def test_blobs_outlive_the_net(net):
    params = sum((list(p) for p in net.params.values()), [])
    blobs = list(net.blobs.values())
    del net
    assert np.isfinite(sum(p.data.sum() + p.diff.sum() for p in params))
    assert np.isfinite(sum(b.data.sum() for b in blobs))


LEVELS = """
layer { name: "data" type: "DummyData" top: "data"
  dummy_data_param { shape { dim: 1 dim: 4 } } }
layer { name: "any" type: "InnerProduct" bottom: "data" top: "any"
  inner_product_param { num_output: 1 } }
layer { name: "one" type: "InnerProduct" bottom: "data" top: "one"
  include { min_level: 1 } inner_product_param { num_output: 1 } }
layer { name: "a_and_b" type: "InnerProduct" bottom: "data" top: "a_and_b"
  include { stage: "a" stage: "b" } inner_product_param { num_output: 1 } }
layer { name: "train" type: "InnerProduct" bottom: "data" top: "train"
  include { phase: TRAIN } inner_product_param { num_output: 1 } }
"""


@pytest.mark.parametrize("args, kwargs, blobs", [
    ((caffe.TEST,), {}, ["data", "any"]),
    ((caffe.TEST,), {"level": 1}, ["data", "any", "one"]),
    ((caffe.TEST,), {"stages": ["a"]}, ["data", "any"]),
    ((caffe.TEST,), {"stages": ["b", "a"]}, ["data", "any", "a_and_b"]),
    ((caffe.TRAIN,), {"level": 2, "stages": ("a", "b")}, ["data", "any", "one", "a_and_b",
                                                          "train"]),
])
def test_net_state(write, args, kwargs, blobs):
    net = caffe.Net(write("levels.prototxt", LEVELS), *args, **kwargs)
    assert [name for name in net.blobs if "_split_" not in name] == blobs


def test_set_input_arrays(write):
    net = caffe.Net(write("memory.prototxt", """
        layer { name: "data" type: "MemoryData" top: "data" top: "label"
          memory_data_param { batch_size: 2 channels: 1 height: 1 width: 3 } }
        """), caffe.TEST)
    data = np.arange(12, dtype=np.float32).reshape(4, 1, 1, 3)
    net.set_input_arrays(data, np.array([5.0, 6, 7, 8], dtype=np.float32))
    first = {name: data.copy() for name, data in net.forward().items()}
    second = net.forward()   # views of the net's memory, as in BVLC
    assert first["label"].tolist() == [5, 6] and second["label"].tolist() == [7, 8]
    assert np.array_equal(second["data"], data[2:])


def test_callbacks_see_every_layer(net):
    seen = []
    net.before_forward(lambda i: seen.append(("bf", i)))
    net.after_backward(lambda i: seen.append(("ab", i)))
    net.forward()
    net.backward()
    assert seen == [("bf", 0), ("bf", 1), ("bf", 2), ("bf", 3),
                    ("ab", 3), ("ab", 2), ("ab", 1), ("ab", 0)]


# --- mistakes ------------------------------------------------------------------------------
def test_unknown_names(net, deploy):
    with pytest.raises(KeyError, match="net 'testnet' has no blob named 'nope'.*'conv'"):
        net.blobs["nope"]
    with pytest.raises(KeyError, match="no blob named 'nope'"):
        net.forward(blobs=["nope"])
    with pytest.raises(KeyError, match="no layer named 'fc9'"):
        net.forward(end="fc9")
    with pytest.raises(KeyError, match="no layer with parameters named 'loss'"):
        net.params["loss"]
    with pytest.raises(ValueError, match=r"do not match net inputs: got \['image'\].*\['data'\]"):
        deploy.forward(image=np.zeros((4, 3, 2, 2)))


def test_wrong_input_shapes_name_the_blob(deploy):
    with pytest.raises(ValueError, match=r"input blob 'data' is not batch sized: .*\(3, 3, 2, "
                                         r"2\).*\(4, 3, 2, 2\)"):
        deploy.forward(data=np.zeros((3, 3, 2, 2)))
    with pytest.raises(ValueError, match=r"input blob 'data': an array of shape \(4, 3, 5, 5\) "
                                         r"does not fit the blob's shape \(4, 3, 2, 2\)"):
        deploy.forward(data=np.zeros((4, 3, 5, 5)))


def test_file_errors_name_the_file(write, tmp_path, net):
    with pytest.raises(caffe.pycaffe.CaffeError, match="missing.prototxt"):
        caffe.Net(str(tmp_path / "missing.prototxt"), caffe.TEST)
    model = write("deploy.prototxt", DEPLOY_IP)
    with pytest.raises(caffe.pycaffe.CaffeError, match="nothere.caffemodel"):
        caffe.Net(model, caffe.TEST, weights=str(tmp_path / "nothere.caffemodel"))
    other = str(tmp_path / "other.caffemodel")
    net.save(other)
    deploy = caffe.Net(model, caffe.TEST)
    deploy_like = write("ip.prototxt", DEPLOY_IP.replace('"deploy"', '"x"'))
    assert caffe.Net(deploy_like, caffe.TEST)   # builds; only the weights below do not fit
    bad = write("bad.prototxt", conv_ip_loss().replace('name: "conv"', 'name: "ip"', 1)
                .replace('name: "ip" bottom: "conv"', 'name: "ip2" bottom: "conv"'))
    with pytest.raises(caffe.pycaffe.CaffeError, match=r"other.caffemodel.*layer 'ip'"):
        caffe.Net(bad, caffe.TRAIN, weights=other)
    del deploy


def test_bad_phase_and_arguments(write):
    model = write("deploy.prototxt", DEPLOY_IP)
    with pytest.raises(ValueError, match="caffe.TRAIN .0. or caffe.TEST .1., got 'test'"):
        caffe.Net(model, "test")
    with pytest.raises(TypeError, match="network_file, phase"):
        caffe.Net(model)
    with pytest.raises(TypeError, match="unexpected keyword"):
        caffe.Net(model, caffe.TEST, wieghts="x")
