"""Net construction: state filtering, splits, in-place wiring, backward analysis, sharing."""
import logging

import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_cli.net import weights as net_weights
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.net.net import Net
from pycaffe_cli.net.passes import filter_net, insert_splits
from pycaffe_cli.proto import caffe_pb2

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST


def net_param(text):
    return text_format.Parse(text, caffe_pb2.NetParameter())


INPUTS = """
name: "tiny"
layer { name: "input" type: "Input" top: "data" top: "target"
        input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
"""

IP_LOSS = INPUTS + """
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "target" top: "loss" }
"""


def fill_inputs(net, seed=0):
    rng = np.random.default_rng(seed)
    for blob in net.input_blobs:
        blob.data[...] = rng.normal(size=blob.shape)


# --- filtering -------------------------------------------------------------------------------
RULES = """
name: "rules"
state { phase: TRAIN level: 2 stage: "a" }
layer { name: "train_only" type: "Silence" include { phase: TRAIN } }
layer { name: "test_only" type: "Silence" include { phase: TEST } }
layer { name: "not_test" type: "Silence" exclude { phase: TEST } }
layer { name: "min3" type: "Silence" include { min_level: 3 } }
layer { name: "max2" type: "Silence" include { max_level: 2 } }
layer { name: "stage_a" type: "Silence" include { stage: "a" } }
layer { name: "stage_b" type: "Silence" include { stage: "b" } }
layer { name: "not_a" type: "Silence" include { not_stage: "a" } }
layer { name: "either" type: "Silence" include { stage: "b" } include { phase: TRAIN } }
layer { name: "plain" type: "Silence" }
"""


def test_filter_net_applies_phase_level_and_stage_rules():
    kept = [layer.name for layer in filter_net(net_param(RULES)).layer]
    assert kept == ["train_only", "not_test", "max2", "stage_a", "either", "plain"]


def test_filter_net_rejects_include_and_exclude_together():
    param = net_param('layer { name: "x" type: "Silence" include { phase: TRAIN } '
                      'exclude { phase: TEST } }')
    with pytest.raises(CaffeError, match='layer "x".*include.*exclude'):
        filter_net(param)


# --- splits ----------------------------------------------------------------------------------
def test_insert_splits_names_and_rewires_like_caffe():
    param = net_param(INPUTS + """
        layer { name: "a" type: "ReLU" bottom: "data" top: "a" }
        layer { name: "b" type: "ReLU" bottom: "data" top: "b" }
    """)
    split = insert_splits(param)
    names = [layer.name for layer in split.layer]
    assert names == ["input", "data_input_0_split", "a", "b"]
    splitter = split.layer[1]
    assert splitter.type == "Split" and list(splitter.bottom) == ["data"]
    assert list(splitter.top) == ["data_input_0_split_0", "data_input_0_split_1"]
    assert split.layer[2].bottom[0] == "data_input_0_split_0"
    assert split.layer[3].bottom[0] == "data_input_0_split_1"


def test_insert_splits_moves_an_explicit_loss_weight_onto_the_split():
    param = net_param(INPUTS + """
        layer { name: "a" type: "ReLU" bottom: "data" top: "a" loss_weight: 2 }
        layer { name: "b" type: "ReLU" bottom: "a" top: "b" }
    """)
    split = insert_splits(param)
    relu_a, splitter = split.layer[1], split.layer[2]
    assert len(relu_a.loss_weight) == 0
    assert list(splitter.top) == ["a_a_0_split_0", "a_a_0_split_1"]
    assert list(splitter.loss_weight) == [2.0, 0.0]
    assert split.layer[3].bottom[0] == "a_a_0_split_1"


def test_unknown_bottom_names_the_layer():
    param = net_param(INPUTS + 'layer { name: "r" type: "ReLU" bottom: "nope" top: "r" }')
    with pytest.raises(CaffeError, match='layer "r": unknown bottom blob "nope"'):
        Net(param, TRAIN)


# --- wiring ----------------------------------------------------------------------------------
def test_in_place_layers_reuse_the_bottom_blob_and_outputs_are_sorted():
    param = net_param(INPUTS + """
        layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
                inner_product_param { num_output: 2 } }
        layer { name: "relu" type: "ReLU" bottom: "ip" top: "ip" }
        layer { name: "zloss" type: "EuclideanLoss" bottom: "ip" bottom: "target" top: "zloss" }
        layer { name: "copy" type: "ReLU" bottom: "data" top: "acopy" }
    """)
    net = Net(param, TRAIN)
    relu = net.layer_entries[net.layer_id("relu")]
    assert relu.tops[0] is relu.bottoms[0]
    assert [net.blob_names[i] for i in net.output_blob_indices] == ["acopy", "zloss"]
    assert [net.blob_names[i] for i in net.input_blob_indices] == ["data", "target"]


def test_duplicate_top_is_an_error():
    param = net_param(INPUTS + """
        layer { name: "a" type: "ReLU" bottom: "data" top: "x" }
        layer { name: "b" type: "ReLU" bottom: "target" top: "x" }
    """)
    with pytest.raises(CaffeError, match='layer "b": top blob "x" produced by multiple'):
        Net(param, TRAIN)


def test_unknown_layer_type_suggests_close_matches():
    param = net_param(INPUTS + 'layer { name: "c" type: "InnerProdcut" bottom: "data" '
                               'top: "c" }')
    with pytest.raises(CaffeError, match='layer "c": unknown layer type "InnerProdcut" '
                                         r"\(did you mean 'InnerProduct'"):
        Net(param, TRAIN)


def test_wrong_blob_count_is_an_error():
    param = net_param(INPUTS + 'layer { name: "l" type: "EuclideanLoss" bottom: "data" '
                               'top: "l" }')
    with pytest.raises(CaffeError, match='layer "l": EuclideanLoss layer takes exactly 2 '
                                         'bottom'):
        Net(param, TRAIN)


def test_setup_logs_shapes_and_memory(caplog):
    with caplog.at_level(logging.INFO, logger="pycaffe"):
        Net(net_param(IP_LOSS), TRAIN)
    text = caplog.text
    assert "Top shape: 4 3 (12)" in text
    assert "    with loss weight 1" in text
    assert f"Memory required for data: {(12 + 8 + 8 + 1) * 4}" in text
    assert "ip needs backward computation." in text
    assert "input does not need backward computation." in text
    assert "This network produces output loss" in text


# --- backward analysis -----------------------------------------------------------------------
def test_loss_is_the_weighted_sum_and_backward_reaches_params():
    param = net_param(IP_LOSS.replace('top: "loss" }', 'top: "loss" loss_weight: 3 }'))
    net = Net(param, TRAIN)
    fill_inputs(net)
    loss = net.forward()
    ip, target = net.blob_by_name("ip").data, net.blob_by_name("target").data
    expected = 3 * np.sum((ip - target) ** 2) / 4 / 2
    assert loss == pytest.approx(expected, rel=1e-5)
    net.clear_param_diffs()
    net.backward()
    data = net.blob_by_name("data").data
    grad_ip = 3 * (ip - target) / 4
    np.testing.assert_allclose(net.layer_by_name("ip").blobs[0].diff, grad_ip.T @ data,
                               rtol=1e-5, atol=1e-6)


def test_lr_mult_zero_and_no_loss_skip_backward():
    param = net_param(INPUTS + """
        layer { name: "frozen" type: "InnerProduct" bottom: "data" top: "f"
                param { lr_mult: 0 } param { lr_mult: 0 }
                inner_product_param { num_output: 2 } }
        layer { name: "side" type: "InnerProduct" bottom: "data" top: "side"
                inner_product_param { num_output: 2 } }
        layer { name: "top" type: "InnerProduct" bottom: "f" top: "t"
                inner_product_param { num_output: 2 } }
        layer { name: "loss" type: "EuclideanLoss" bottom: "t" bottom: "target" top: "loss" }
    """)
    net = Net(param, TRAIN)
    need = {entry.name: entry.need_backward for entry in net.layer_entries}
    assert need == {"input": False, "data_input_0_split": False, "frozen": False,
                    "side": False, "top": True, "loss": True}
    assert net.layer_entries[net.layer_id("top")].bottom_need_backward == [False]
    assert net.layer_by_name("frozen").param_propagate_down == [False, False]


def test_propagate_down_false_stops_gradient_to_that_bottom():
    param = net_param(INPUTS + """
        layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
                inner_product_param { num_output: 2 } }
        layer { name: "ip2" type: "InnerProduct" bottom: "ip" top: "ip2" propagate_down: false
                inner_product_param { num_output: 2 } }
        layer { name: "loss" type: "EuclideanLoss" bottom: "ip2" bottom: "target" top: "loss" }
    """)
    net = Net(param, TRAIN)
    need = {entry.name: entry.need_backward for entry in net.layer_entries}
    assert need["ip2"] and not need["ip"]
    assert net.layer_entries[net.layer_id("ip2")].bottom_need_backward == [False]


def test_force_backward_reaches_the_data():
    param = net_param("force_backward: true\n" + IP_LOSS)
    net = Net(param, TRAIN)
    need = {entry.name: entry.bottom_need_backward for entry in net.layer_entries}
    assert need["loss"] == [True, True]  # Euclidean allows both
    assert need["ip"] == [True]
    fill_inputs(net)
    net.forward()
    net.backward()
    assert np.abs(net.blob_by_name("data").diff).sum() > 0


# --- parameter sharing -----------------------------------------------------------------------
SHARED = INPUTS + """
layer { name: "a" type: "InnerProduct" bottom: "data" top: "a"
        param { name: "w" } param { name: "b" } inner_product_param { num_output: 3 } }
layer { name: "b" type: "InnerProduct" bottom: "a" top: "b"
        param { name: "w" %s } param { name: "b" } inner_product_param { num_output: 3 } }
layer { name: "loss" type: "EuclideanLoss" bottom: "b" bottom: "data" top: "loss" }
"""


def test_shared_params_share_data_and_diff_and_count_once():
    net = Net(net_param(SHARED % ""), TRAIN)
    a, b = net.layer_by_name("a"), net.layer_by_name("b")
    assert b.blobs[0].shares_data_with(a.blobs[0])
    assert [param.owner for param in net.param_entries] == [-1, -1, 0, 1]
    assert len(net.learnable_params) == 2
    assert [param.learnable_id for param in net.param_entries] == [0, 1, 0, 1]


def test_shared_param_gradient_is_the_sum_of_both_uses():
    net = Net(net_param(SHARED % ""), TRAIN)
    fill_inputs(net)
    net.forward()
    net.clear_param_diffs()
    net.backward()
    data = net.blob_by_name("data").data
    a = net.blob_by_name("a").data
    w = net.layer_by_name("a").blobs[0].data
    top_grad = (net.blob_by_name("b").data - data) / 4
    grad_a = top_grad @ w
    expected = top_grad.T @ a + grad_a.T @ data
    np.testing.assert_allclose(net.learnable_params[0].diff, expected, rtol=1e-4, atol=1e-6)


def test_strict_sharing_rejects_other_shapes_permissive_allows_same_count():
    text = INPUTS + """
    layer { name: "a" type: "InnerProduct" bottom: "data" top: "a" param { name: "w" %s }
            inner_product_param { num_output: 6 bias_term: false } }
    layer { name: "b" type: "InnerProduct" bottom: "a" top: "b" param { name: "w" %s }
            inner_product_param { num_output: 3 bias_term: false } }
    """
    with pytest.raises(CaffeError, match="layer \"b\": cannot share param 'w'.*shape"):
        Net(net_param(text % ("", "")), TRAIN)
    with pytest.raises(CaffeError, match="mismatched lr_mult"):
        Net(net_param(text % ("lr_mult: 1 share_mode: PERMISSIVE",
                              "lr_mult: 2 share_mode: PERMISSIVE")), TRAIN)
    net = Net(net_param(text % ("", "share_mode: PERMISSIVE")), TRAIN)
    assert net.layer_by_name("b").blobs[0].shares_data_with(net.layer_by_name("a").blobs[0])


def test_too_many_param_specs_is_an_error():
    param = net_param(INPUTS + """
        layer { name: "r" type: "ReLU" bottom: "data" top: "r" param { lr_mult: 1 } }""")
    with pytest.raises(CaffeError, match='layer "r": too many param specs'):
        Net(param, TRAIN)


# --- weights ---------------------------------------------------------------------------------
def test_weights_round_trip_through_binaryproto_and_hdf5(tmp_path):
    source = Net(net_param(IP_LOSS), TRAIN)
    for suffix, save in ((".caffemodel", net_weights.save_binaryproto),
                         (".caffemodel.h5", net_weights.save_hdf5)):
        path = str(tmp_path / f"w{suffix}")
        save(source, path)
        target = Net(net_param(IP_LOSS), TRAIN)
        net_weights.copy_trained_layers_from(target, path)
        for mine, theirs in zip(target.learnable_params, source.learnable_params):
            np.testing.assert_array_equal(mine.data, theirs.data)


def test_weights_shape_mismatch_names_layer_and_file(tmp_path):
    path = str(tmp_path / "w.caffemodel")
    net_weights.save_binaryproto(Net(net_param(IP_LOSS), TRAIN), path)
    other = Net(net_param(IP_LOSS.replace("num_output: 2", "num_output: 5")
                          .replace("dim: 2 } }", "dim: 5 } }")), TRAIN)
    with pytest.raises(CaffeError, match="w.caffemodel: cannot copy param 0 weights from "
                                         "layer 'ip'; shape mismatch"):
        net_weights.copy_trained_layers_from(other, path)


def test_debug_info_logs_forward_and_backward_norms(caplog):
    net = Net(net_param("debug_info: true\n" + IP_LOSS), TRAIN)
    fill_inputs(net)
    with caplog.at_level(logging.INFO, logger="pycaffe"):
        net.forward()
        net.backward()
    assert "    [Forward] Layer ip, top blob ip data: " in caplog.text
    assert "    [Forward] Layer ip, param blob 0 data: " in caplog.text
    assert "    [Backward] Layer ip, param blob 0 diff: " in caplog.text
    assert "    [Backward] All net params (data, diff): L1 norm = (" in caplog.text


def test_hdf5_weights_skip_shared_params_and_load_back(tmp_path):
    source = Net(net_param(SHARED % ""), TRAIN)
    path = str(tmp_path / "shared.caffemodel.h5")
    net_weights.save_hdf5(source, path)
    target = Net(net_param(SHARED % ""), TRAIN)
    net_weights.copy_trained_layers_from(target, path)
    np.testing.assert_array_equal(target.layer_by_name("b").blobs[0].data,
                                  source.layer_by_name("a").blobs[0].data)
    unshared = Net(net_param(SHARED.replace('name: "w" %s', "").replace(
        'param { name: "b" } inner_product_param { num_output: 3 } }\nlayer { name: "loss"',
        'inner_product_param { num_output: 3 } }\nlayer { name: "loss"')), TRAIN)
    with pytest.raises(CaffeError, match="incompatible number of blobs for layer b"):
        net_weights.copy_trained_layers_from(unshared, path)
