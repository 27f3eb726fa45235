"""scripts/bench: the training nets as timed, and --alone: each layer, then each BLAS product,
of a pass at its best alone."""
import os

import numpy as np
import pytest

from pycaffe_cli import blas
from pycaffe_cli.layers.kernels.cpu import gemm
from pycaffe_cli.log import LOG
from pycaffe_cli.net.net import Net
from pycaffe_cli.proto import caffe_pb2
from tests.scripts.loading import load_script

LENET = "models/lenet/lenet_deploy.prototxt"


@pytest.fixture(scope="module")
def bench():
    return load_script("bench")


@pytest.fixture
def lenet(bench):
    """LeNet at batch 2 with force_backward (conv1 runs im2col + GEMM at this batch), after
    one pass, and its top after that pass."""
    model = bench.with_batch(LENET, (2, 1, 28, 28))
    net = Net.from_file(model, caffe_pb2.TRAIN)
    os.unlink(model)
    bench.run_pass(net.layer_entries, lambda run, setup: run())
    return net, net.blob_by_name("prob").data.copy()


def test_products_alone_times_every_product_of_the_pass_once(bench, lenet):
    net, prob = lenet
    matmul, accumulate = blas.matmul, gemm.gemm_accumulate
    times = bench.products_alone(net.layer_entries, repeats=2)
    # conv1, conv2, ip1, ip2: a forward product, a weight gradient and a data gradient each
    assert len(times) == 12 and all(t > 0 for t in times)
    assert blas.matmul is matmul and gemm.gemm_accumulate is accumulate
    from pycaffe_cli.layers import inner_product
    from pycaffe_cli.layers.convolution import backend as convolution_backend
    assert convolution_backend.gemm_accumulate is accumulate
    assert inner_product.gemm_accumulate is accumulate
    # a repeated product writes the same output: the pass's results are unchanged
    np.testing.assert_array_equal(net.blob_by_name("prob").data, prob)


def test_layers_alone_times_every_forward_and_backward(bench, lenet):
    net, prob = lenet
    times = bench.layers_alone(net.layer_entries, repeats=2)
    assert len(times) == 2 * len(net.layer_entries) and all(t >= 0 for t in times)
    np.testing.assert_array_equal(net.blob_by_name("prob").data, prob)


def test_report_alone_prints_both_sums_against_the_floor(bench, capsys):
    disabled = LOG.disabled
    try:
        bench.report_alone("LeNet", LENET, (2, 1, 28, 28), rate=1e11, repeats=2)
    finally:
        LOG.disabled = disabled
    out = capsys.readouterr().out
    assert "LeNet (batch 2, 1x28x28), best of 2 repeats each; FLOP floor" in out
    assert "every layer alone:" in out and "its 12 BLAS products alone:" in out


def python_shared_memory():
    """Python's shared-memory segments (multiprocessing names them psm_*)."""
    folder = "/dev/shm"
    return {name for name in os.listdir(folder) if name.startswith("psm_")} \
        if os.path.isdir(folder) else set()


def test_core_handoff_times_two_cores_and_leaves_nothing_behind(bench):
    cores = os.sched_getaffinity(0)
    before = python_shared_memory()
    try:
        os.sched_setaffinity(0, {min(cores)})
        assert bench.core_handoff_us() is None          # one usable core: no figure
        assert os.sched_getaffinity(0) == {min(cores)}
        os.sched_setaffinity(0, cores)
        if len(cores) >= 2:
            handoff = bench.core_handoff_us()
            assert handoff is not None and handoff > 0
        assert os.sched_getaffinity(0) == cores          # the caller's cores given back
    finally:
        os.sched_setaffinity(0, cores)
    assert python_shared_memory() <= before


@pytest.mark.parametrize("swap", [0, 1])
def test_locality_layer_computes_both_halves(bench, swap):
    src = np.arange(8, dtype=np.float32)
    dst = np.zeros(8, np.float32)
    bench._locality_layer()(src, dst, swap)
    np.testing.assert_allclose(dst, src * np.float32(0.999) + np.float32(0.001), rtol=1e-6)


def test_locality_reports_one_pair_of_times_a_round(bench, capsys, monkeypatch):
    monkeypatch.setattr(bench, "LOCALITY_LAYERS", 4)
    times = bench.locality(repeats=1, rounds=2)
    assert len(times) == 2 and all(len(row) == 2 and min(row) > 0 for row in times)
    assert capsys.readouterr().out.count("halves handed over every layer") == 2


def test_rounds_through_states_time_each_runtime_after_the_handoff(bench, monkeypatch):
    calls = []
    monkeypatch.setattr(bench, "core_handoff_us", lambda: calls.append("handoff") or 80.0)
    rounds = bench.rounds_through_states([lambda: calls.append("a"), lambda: calls.append("b")],
                                         seconds=0)   # no time: one round all the same
    passes = 1 + bench.STATE_PASSES
    assert calls == ["handoff"] + ["a"] * passes + ["b"] * passes
    assert len(rounds) == 1 and rounds[0][0] == 80.0 and min(rounds[0][1:]) >= 0


def test_state_medians_split_the_rounds_at_the_widest_gap_in_the_handoffs(bench):
    # This machine's figures: 80-110 us fast, 250-320 slow, and now and then 44.
    rounds = [[80, 20, 30], [44, 22, 31], [250, 30, 40], [110, 21, 29], [320, 40, 50]]
    assert bench.state_medians(rounds) == {"fast": (3, [21.0, 30.0]),
                                           "slow": (2, [35.0, 45.0])}
    assert bench.state_medians(rounds[:2] + rounds[3:4]) == {"fast": (3, [21.0, 30.0])}
    assert bench.state_medians(rounds[:1]) == {"fast": (1, [20.0, 30.0])}


def test_training_nets_learn_from_the_batch(bench):
    """The BatchNorm nets are timed as training runs them: batch statistics, every gradient,
    the batch asked for."""
    model = bench.with_batch("models/resnet50/deploy.prototxt", (2, 3, 224, 224))
    LOG.disabled = True
    try:
        net = Net.from_file(model, caffe_pb2.TRAIN)
    finally:
        LOG.disabled = False
        os.unlink(model)
    norms = [entry.layer for entry in net.layer_entries if entry.layer.type == "BatchNorm"]
    assert len(norms) == 53 and not any(layer.use_global_stats for layer in norms)
    assert net.blob_by_name("data").shape == (2, 3, 224, 224)
    assert all(entry.bottom_need_backward[0] for entry in net.layer_entries[1:]
               if entry.bottoms)
