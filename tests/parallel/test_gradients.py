"""Gradient sums: buckets in backward order, started during backward, averaged as Caffe."""
import numpy as np
import pytest

from pycaffe_cli.net.net import Net
from pycaffe_cli.parallel.communicator import SingleProcess
from pycaffe_cli.parallel.gradients import (GradientReducer, broadcast_weights, plan_buckets,
                                            param_ready_layers)
from pycaffe_cli.proto import caffe_pb2
from google.protobuf import text_format
from tests.parallel.test_communicator import on_ranks

# layers: 0 data, 1 ip1, 2 ip2 (param "shared"), 3 ip3 (shares "shared"), 4 frozen (lr 0),
# 5 loss.
NET = """
layer { name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param { shape { dim: 4 dim: 5 } shape { dim: 4 }
    data_filler { type: "gaussian" } data_filler { type: "constant" value: 1 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
  inner_product_param { num_output: 6 weight_filler { type: "gaussian" } } }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" param { name: "shared" }
  inner_product_param { num_output: 6 bias_term: false weight_filler { type: "gaussian" } } }
layer { name: "ip3" type: "InnerProduct" bottom: "ip2" top: "ip3" param { name: "shared" }
  inner_product_param { num_output: 6 bias_term: false } }
layer { name: "frozen" type: "InnerProduct" bottom: "ip3" top: "out"
  param { lr_mult: 0 } param { lr_mult: 0 }
  inner_product_param { num_output: 3 weight_filler { type: "gaussian" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "out" bottom: "label" top: "loss" }
"""


def make_net():
    param = text_format.Parse(NET, caffe_pb2.NetParameter())
    return Net(param, phase=caffe_pb2.TRAIN)


def names(net, bucket):
    owners = {id(entry.blob): (net.layer_entries[entry.layer_id].name, entry.index)
              for entry in reversed(net.param_entries)}
    return [owners[id(blob)] for blob, _, _ in bucket.params]


def test_a_shared_param_is_ready_after_its_first_layer():
    net = make_net()
    ready = param_ready_layers(net)
    shared = net.param_entries[net.layer_entries[3].param_ids[0]].learnable_id
    assert ready[shared] == 2


def test_buckets_follow_backward_and_skip_frozen_params():
    net = make_net()
    single = plan_buckets(net, bucket_bytes=1)     # every param a bucket of its own
    assert [names(net, b) for b in single] == [[("ip2", 0)], [("ip1", 0)], [("ip1", 1)]]
    assert [b.ready_layer for b in single] == [2, 1, 1]
    [everything] = plan_buckets(net, bucket_bytes=1 << 20)
    assert names(net, everything) == [("ip2", 0), ("ip1", 0), ("ip1", 1)]
    assert everything.ready_layer == 1 and everything.size == 36 + 30 + 6
    assert [b.size for b in plan_buckets(net, bucket_bytes=36 * 4)] == [36, 36]


def _diffs(net):
    return [entry.blob.cpu_diff.copy() for entry in net.learnable_entries]


@pytest.mark.parametrize("iter_size", [1, 2])
def test_sums_start_during_the_last_backward_and_average(iter_size):
    nets = [make_net() for _ in range(2)]

    def work(comm):
        net = nets[comm.rank]
        reducer = GradientReducer(net, comm, iter_size=iter_size, bucket_bytes=1)
        started_at, now = [], {"pass": None, "layer": None}
        original = comm.allreduce_start
        comm.allreduce_start = lambda buffer: (started_at.append((now["pass"], now["layer"])),
                                               original(buffer))[1]
        net.add_callback("before_backward", lambda i: now.update(layer=i))
        reducer.on_start()
        for blob_index, entry in enumerate(net.learnable_entries):
            entry.blob.diff[...] = (comm.rank + 1) * (blob_index + 1)
        for backward_pass in range(iter_size):
            now["pass"] = backward_pass
            net.backward()
        local = _diffs(net)
        now.update({"pass": "ready", "layer": None})
        reducer.on_gradients_ready()
        return started_at, local, _diffs(net)

    results = on_ranks(2, work)
    for started_at, _, averaged in results:
        # in the last pass only: ip2's param after layer 2, ip1's two after layer 1
        assert started_at == [(iter_size - 1, 2), (iter_size - 1, 1), (iter_size - 1, 1)]
    for param_id, entry in enumerate(nets[0].learnable_entries):
        locals_ = [local[param_id] for _, local, _ in results]
        if entry.lr_mult == 0:
            continue
        expected = (locals_[0] + locals_[1]) * np.float32(0.5)
        for _, _, averaged in results:
            np.testing.assert_array_equal(averaged[param_id], expected)


def test_without_layer_wise_reduce_one_sum_when_gradients_are_ready():
    nets = [make_net() for _ in range(2)]

    def work(comm):
        reducer = GradientReducer(nets[comm.rank], comm, layer_wise=False)
        reducer.on_start()
        nets[comm.rank].backward()
        before = list(comm._lib.calls)
        reducer.on_gradients_ready()
        return before, comm._lib.calls
    for before, after in on_ranks(2, work):
        assert before == [] and after == [("all_reduce", 72)]


def test_broadcast_gives_every_rank_rank_0s_weights():
    nets = [make_net() for _ in range(3)]

    def work(comm):
        broadcast_weights(nets[comm.rank], comm)
    on_ranks(3, work)
    for net in nets[1:]:
        for mine, root in zip(net.learnable_entries, nets[0].learnable_entries):
            np.testing.assert_array_equal(mine.blob.cpu_data, root.blob.cpu_data)


def test_one_rank_is_its_own_average():
    net = make_net()
    reducer = GradientReducer(net, SingleProcess())
    reducer.on_start()
    net.forward_backward()
    before = _diffs(net)
    reducer.on_gradients_ready()
    for a, b in zip(before, _diffs(net)):
        np.testing.assert_array_equal(a, b)
