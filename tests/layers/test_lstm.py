"""LSTM: the unrolled net against a numpy LSTM, state carried between batches, cont resets,
exposed hidden state (h_0, c_0 -> h_T, c_T), static input, gradients, Caffe's blob order and
layer names, in a Net with shared weights, errors."""
import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_cli import backend
from pycaffe_cli.blob import Blob
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.net import Net
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.solvers import create_solver
from pycaffe_cli.testing import check_gradient
from tests.layer_helpers import set_up

T, N, I, D = 3, 2, 4, 4


def lstm(extra="", name="lstm"):
    return (f'name: "{name}" type: "LSTM" recurrent_param {{ num_output: {D} '
            f'weight_filler {{ type: "uniform" min: -0.5 max: 0.5 }} '
            f'bias_filler {{ type: "uniform" min: -0.5 max: 0.5 }} {extra} }}')


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def reference(blobs, x, cont, h0=None, c0=None, x_static=None):
    """h (T, N, D), h_T and c_T of an LSTM with Caffe's gate order (i, f, o, g)."""
    w = [b.data.astype(np.float64) for b in blobs]
    n = x.shape[1]
    if x_static is not None:
        w_xc, b_c, w_static, w_hc = w
        static = x_static.reshape(n, -1) @ w_static.T
    else:
        (w_xc, b_c, w_hc), static = w, 0.0
    h = np.zeros((n, D)) if h0 is None else h0.reshape(n, D).astype(np.float64)
    c = np.zeros((n, D)) if c0 is None else c0.reshape(n, D).astype(np.float64)
    outputs = []
    for t in range(x.shape[0]):
        keep = cont[t][:, None]
        gates = (keep * h) @ w_hc.T + x[t].reshape(n, -1) @ w_xc.T + b_c + static
        i, f = sigmoid(gates[:, :D]), sigmoid(gates[:, D:2 * D])
        o, g = sigmoid(gates[:, 2 * D:3 * D]), np.tanh(gates[:, 3 * D:])
        c = keep * f * c + i * g
        h = o * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs), h, c


def data(seed, t=T, n=N, feature_shape=(I,), resets=True):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(t, n) + feature_shape)
    cont = np.ones((t, n))
    if resets:
        cont[0] = 0
        cont[min(2, t - 1), n - 1] = 0
    return x, cont


def close(actual, expected):
    np.testing.assert_allclose(actual, expected.reshape(actual.shape), rtol=1e-5, atol=1e-6)


@pytest.fixture(autouse=True)
def seeded():
    backend.set_random_seed(1701)


@pytest.mark.parametrize("feature_shape", [(I,), (3, 2)])
def test_forward_matches_reference(feature_shape):
    x, cont = data(0, feature_shape=feature_shape)
    layer, bottom, top = set_up(lstm(), [x, cont])
    assert top[0].shape == (T, N, D)
    layer.forward(bottom, top)
    close(top[0].data, reference(layer.blobs, x, cont)[0])


def test_blobs_in_caffes_order():
    layer, _, _ = set_up(lstm(), list(data(0)))
    assert [b.shape for b in layer.blobs] == [(4 * D, I), (4 * D,), (4 * D, D)]
    names = layer.net.param_display_names
    owners = [names[i] for i, o in enumerate(layer.net.param_owners) if o == -1]
    assert owners == ["W_xc", "b_c", "W_hc"]
    for t in range(1, T + 1):
        assert layer.net.layer_by_name(f"lstm_transform_{t}").blobs[0].shares_data_with(
            layer.blobs[2])


def test_unrolled_net_uses_caffes_layer_names():
    layer, _, _ = set_up(lstm(), list(data(0)))
    names = set(layer.net.layer_names)
    for wanted in ["lstm_", "lstm_cont_slice", "lstm_x_transform", "lstm_W_xc_x_slice",
                   "lstm_h_conted_0", "lstm_transform_1", "lstm_gate_input_1", "lstm_unit_1",
                   "lstm_unit_3", "lstm_h_concat", "h_pseudoloss"]:
        assert wanted in names
    assert [layer.net.layers[i].type for i, name in enumerate(layer.net.layer_names)
            if name == "lstm_"] == ["Input", "Input", "Split"]


def test_state_carries_over_between_batches_until_cont_resets():
    x, cont = data(1, resets=False)
    layer, bottom, top = set_up(lstm(), [x, cont])
    bottom[1].data[0] = 0
    layer.forward(bottom, top)
    _, h_final, c_final = reference(layer.blobs, x, bottom[1].data)
    bottom[1].data[0] = 1
    layer.forward(bottom, top)
    close(top[0].data, reference(layer.blobs, x, cont, h0=h_final, c0=c_final)[0])
    bottom[1].data[0] = 0
    layer.forward(bottom, top)
    close(top[0].data, reference(layer.blobs, x, bottom[1].data)[0])


def test_expose_hidden():
    x, cont = data(2, resets=False)
    rng = np.random.default_rng(3)
    h0, c0 = rng.normal(size=(1, N, D)), rng.normal(size=(1, N, D))
    layer, bottom, top = set_up(lstm("expose_hidden: true"), [x, cont, h0, c0], num_tops=3)
    assert [b.shape for b in top] == [(T, N, D), (1, N, D), (1, N, D)]
    for _ in range(2):
        layer.forward(bottom, top)
        h, h_final, c_final = reference(layer.blobs, x, cont, h0=h0, c0=c0)
        close(top[0].data, h)
        close(top[1].data, h_final)
        close(top[2].data, c_final)


def test_static_input():
    x, cont = data(4)
    x_static = np.random.default_rng(5).normal(size=(N, 2, 2))
    layer, bottom, top = set_up(lstm(), [x, cont, x_static])
    assert [b.shape for b in layer.blobs] == [(4 * D, I), (4 * D,), (4 * D, 4), (4 * D, D)]
    layer.forward(bottom, top)
    close(top[0].data, reference(layer.blobs, x, cont, x_static=x_static)[0])


def test_static_input_with_exposed_hidden_state():
    x, cont = data(6)
    rng = np.random.default_rng(7)
    x_static, h0, c0 = (rng.normal(size=s) for s in [(N, 3), (1, N, D), (1, N, D)])
    layer, bottom, top = set_up(lstm("expose_hidden: true"), [x, cont, x_static, h0, c0], 3)
    layer.forward(bottom, top)
    h, h_final, c_final = reference(layer.blobs, x, cont, h0, c0, x_static)
    close(top[0].data, h)
    close(top[2].data, c_final)


@pytest.mark.parametrize("extra_bottoms, check", [([], [0]), ([(N, 3)], [0, 2])])
def test_gradient(extra_bottoms, check):
    x, cont = data(8)
    rng = np.random.default_rng(9)
    layer, bottom, top = set_up(lstm(), [x, cont] + [rng.normal(size=s) for s in extra_bottoms])
    check_gradient(layer, bottom, top, check_bottom=check, threshold=1e-3)


def test_gradient_without_resets_inside_the_batch():
    x, cont = data(10, resets=False)
    cont[0] = 0  # only the first step starts the sequences
    layer, bottom, top = set_up(lstm(), [x, cont])
    check_gradient(layer, bottom, top, check_bottom=[0], threshold=1e-3)


def test_new_batch_size_and_sequence_length():
    layer, bottom, top = set_up(lstm(), list(data(11)))
    for t, n in [(T, 1), (4, 3)]:
        x, cont = data(12, t=t, n=n)
        bottom = [Blob(x.shape), Blob(cont.shape)]
        bottom[0].data[...] = x
        bottom[1].data[...] = cont
        layer.forward(bottom, top)
        close(top[0].data, reference(layer.blobs, x, cont)[0])


def test_one_timestep_at_a_time_gives_the_same_sequence():
    """Caffe's TestForward: the carried-over state makes T=1 batches equal one T=3 batch."""
    x, cont = data(16)
    layer, bottom, top = set_up(lstm(), [x, cont])
    layer.forward(bottom, top)
    whole = top[0].data.copy()
    for t in range(T):
        step = [Blob((1, N, I)), Blob((1, N))]
        step[0].data[...] = x[t:t + 1]
        step[1].data[...] = cont[t:t + 1]
        layer.forward(step, top)
        np.testing.assert_allclose(top[0].data[0], whole[t], rtol=1e-5, atol=1e-6)


NET = """
force_backward: true
layer { name: "x" type: "Input" top: "x" top: "cont"
        input_param { shape { dim: 3 dim: 2 dim: 4 } shape { dim: 3 dim: 2 } } }
layer { name: "a" type: "LSTM" bottom: "x" bottom: "cont" top: "a"
        param { name: "wx" } param { name: "b" } param { name: "wh" }
        recurrent_param { num_output: 4 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "b" type: "LSTM" bottom: "x" bottom: "cont" top: "b"
        param { name: "wx" } param { name: "b" } param { name: "wh" }
        recurrent_param { num_output: 4 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "a" bottom: "b" top: "loss" }
"""


def test_layers_sharing_weights_in_a_net():
    net = Net(text_format.Parse(NET, caffe_pb2.NetParameter()), caffe_pb2.TRAIN)
    a, b = net.layer_by_name("a"), net.layer_by_name("b")
    assert len(net.learnable_params) == 3
    x, cont = data(13)
    net.blob_by_name("x").data[...] = x
    net.blob_by_name("cont").data[...] = cont
    assert net.forward() == 0.0  # b uses a's weights, not its own filled ones
    np.testing.assert_array_equal(net.blob_by_name("a").data, net.blob_by_name("b").data)
    close(net.blob_by_name("a").data, reference(a.blobs, x, cont)[0])
    assert all(mine.shares_data_with(theirs) for mine, theirs in zip(b.blobs, a.blobs))


def test_cont_gets_no_gradient_in_a_net():
    net = Net(text_format.Parse(NET, caffe_pb2.NetParameter()), caffe_pb2.TRAIN)
    for name in "ab":  # force_backward reaches x but not cont
        assert net.bottom_need_backward[net.layer_names.index(name)] == [True, False]


def test_errors_name_the_layer():
    with pytest.raises(CaffeError, match='"lstm".*num_output must be positive'):
        set_up('name: "lstm" type: "LSTM"', list(data(0)))
    with pytest.raises(CaffeError, match='"lstm".*exactly 3 top'):
        set_up(lstm("expose_hidden: true"), list(data(0)) + [np.zeros((1, N, D))] * 2, 1)
    with pytest.raises(CaffeError, match='"lstm".*hidden state input shape'):
        set_up(lstm("expose_hidden: true"),
               list(data(0)) + [np.zeros((1, N, D)), np.zeros((1, N + 1, D))], 3)


SOLVER = """
base_lr: 0.5 lr_policy: "fixed" max_iter: 30 display: 0 random_seed: 3
test_iter: 1 test_interval: 1000 test_initialization: false
net_param {
  layer { name: "data" type: "DummyData" top: "x" top: "cont" top: "target"
          dummy_data_param { shape { dim: 3 dim: 2 dim: 4 } shape { dim: 3 dim: 2 }
                             shape { dim: 3 dim: 2 dim: 4 }
                             data_filler { type: "gaussian" std: 1 }
                             data_filler { type: "constant" value: 1 }
                             data_filler { type: "constant" value: 0.5 } } }
  layer { name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" top: "h"
          recurrent_param { num_output: 4 weight_filler { type: "gaussian" std: 0.1 } } }
  layer { name: "loss" type: "EuclideanLoss" bottom: "h" bottom: "target" top: "loss" }
}
"""


def test_trains_in_a_solver_and_the_test_net_uses_the_trained_weights():
    solver = create_solver(text_format.Parse(SOLVER, caffe_pb2.SolverParameter()))
    first = solver.net.forward()
    solver.step(30)
    assert solver.net.forward() < first / 4
    solver.test_all()
    trained = solver.net.layer_by_name("lstm")
    tested = solver.test_nets[0].layer_by_name("lstm")
    for blob, learnable_id in zip(tested.net.params, tested.net.learnable_param_ids):
        assert blob.shares_data_with(trained.blobs[learnable_id])


# --- GPU mode: the device path gives the CPU's numbers ------------------------------------------
# The unrolled net's layers without a GPU path yet fall back to the CPU, and the top shares the
# inner Concat's output: check_device_tops=False, since that Concat may be one of them.
@pytest.mark.parametrize("extra, extra_bottoms, down", [
    ("", [], [True, False]),
    ("", [(N, 3)], [True, False, True]),
    ("expose_hidden: true", [(1, N, D), (1, N, D)], [True, False, False, False]),
    ("expose_hidden: true", [(N, 3), (1, N, D), (1, N, D)], [False, False, True, False, False]),
])
def test_gpu_matches_cpu(extra, extra_bottoms, down):
    from tests.gpu_helpers import compare_layer_modes
    x, cont = data(30)
    rng = np.random.default_rng(31)
    bottoms = [x, cont] + [rng.normal(size=s) for s in extra_bottoms]
    num_tops = 3 if extra else 1
    dy = [rng.normal(size=(T, N, D))] + [np.zeros((1, N, D))] * (num_tops - 1)
    backend.set_random_seed(1701)
    # summation orders differ between the device's GEMMs and BLAS's
    compare_layer_modes(lstm(extra), bottoms, num_tops, top_diffs=dy, propagate_down=down,
                        phase=0, atol=1e-5, check_device_tops=False)


def run_steps(gpu, weights=None):
    """A T=3 batch, then its timesteps one batch at a time (the layer unrolls again for T=1
    and carries the state over), then backward through the last step; in CPU or GPU mode."""
    x, cont = data(32)
    backend.set_random_seed(1701)
    layer, bottom, top = set_up(lstm(), [x, cont])
    if gpu:
        backend.set_mode_gpu(0)
    try:
        for blob, values in zip(layer.blobs, weights or []):
            blob.data[...] = values
        weights = [b.cpu_data.copy() for b in layer.blobs]
        layer.forward(bottom, top)
        outputs = [top[0].cpu_data.copy()]
        for t in range(T):
            step = [Blob((1, N, I)), Blob((1, N))]
            step[0].data[...] = x[t:t + 1]
            step[1].data[...] = 1
            layer.forward(step, top)
            outputs.append(top[0].cpu_data.copy())
        top[0].diff[...] = 1
        layer.backward(top, [True, False], step)
        outputs += [step[0].cpu_diff.copy()] + [b.cpu_diff.copy() for b in layer.blobs]
    finally:
        backend.set_mode_cpu()
    return outputs, weights


@pytest.mark.gpu
def test_gpu_state_carries_over_and_unrolls_again_like_cpu():
    cpu, weights = run_steps(gpu=False)
    gpu, _ = run_steps(gpu=True, weights=weights)
    for want, got in zip(cpu, gpu):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_gpu_gradient(gpu_mode):
    x, cont = data(33, t=2, n=1, feature_shape=(2,))
    layer, bottom, top = set_up(lstm(), [x, cont])
    # the weights' gradients are compared with the CPU's in test_gpu_matches_cpu
    check_gradient(layer, bottom, top, check_bottom=[0], check_params=False, threshold=1e-3,
                   directions=2, elements=3)
