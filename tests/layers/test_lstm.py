"""LSTM: the unrolled net against a numpy LSTM (forward, and backward by central differences of
it), state carried between batches, cont resets, exposed hidden state (h_0, c_0 -> h_T, c_T),
static input, gradients, Caffe's blob order and layer names, in a Net with shared weights,
errors; the layer's own tests on both engines."""
import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_cli import backend
from pycaffe_cli.blob import Blob
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.net.net import Net
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.solvers import create_solver
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import engine_cases
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
    w = [(b.cpu_data if isinstance(b, Blob) else b).astype(np.float64) for b in blobs]
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


def numeric_gradients(loss, arrays, step=1e-6):
    """Central differences of the float64 function ``loss()`` with respect to each array's
    elements (perturbed in place, then restored)."""
    grads = []
    for a in arrays:
        grad = np.empty_like(a)
        for index in np.ndindex(a.shape):
            value = a[index]
            a[index] = value + step
            plus = loss()
            a[index] = value - step
            minus = loss()
            a[index] = value
            grad[index] = (plus - minus) / (2 * step)
        grads.append(grad)
    return grads


def assert_gpu_path(layer):
    """In GPU mode the layer has a GPU path (the unrolled net's layers without one fall back
    to the CPU, and the top shares the inner Concat's output, so where the tops were written
    is not checked)."""
    if backend.mode() is backend.Mode.GPU:
        assert layer.forward_gpu is not None and layer.backward_gpu is not None


@pytest.fixture(autouse=True)
def seeded():
    backend.set_random_seed(1701)


@pytest.mark.parametrize("feature_shape", [(I,), (3, 2)])
def test_forward_matches_reference(feature_shape, engine):
    x, cont = data(0, feature_shape=feature_shape)
    layer, bottom, top = set_up(lstm(), [x, cont])
    assert top[0].shape == (T, N, D)
    assert_gpu_path(layer)
    layer.forward(bottom, top)
    close(top[0].cpu_data, reference(layer.blobs, x, cont)[0])


def test_blobs_in_caffes_order():
    layer, _, _ = set_up(lstm(), list(data(0)))
    assert [b.shape for b in layer.blobs] == [(4 * D, I), (4 * D,), (4 * D, D)]
    owners = [p.display_name for p in layer.net.param_entries if p.owner == -1]
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


def test_expose_hidden(engine):
    x, cont = data(2, resets=False)
    rng = np.random.default_rng(3)
    h0, c0 = rng.normal(size=(1, N, D)), rng.normal(size=(1, N, D))
    layer, bottom, top = set_up(lstm("expose_hidden: true"), [x, cont, h0, c0], num_tops=3)
    assert [b.shape for b in top] == [(T, N, D), (1, N, D), (1, N, D)]
    assert_gpu_path(layer)
    for _ in range(2):
        layer.forward(bottom, top)
        h, h_final, c_final = reference(layer.blobs, x, cont, h0=h0, c0=c0)
        close(top[0].cpu_data, h)
        close(top[1].cpu_data, h_final)
        close(top[2].cpu_data, c_final)


def test_static_input(engine):
    x, cont = data(4)
    x_static = np.random.default_rng(5).normal(size=(N, 2, 2))
    layer, bottom, top = set_up(lstm(), [x, cont, x_static])
    assert [b.shape for b in layer.blobs] == [(4 * D, I), (4 * D,), (4 * D, 4), (4 * D, D)]
    assert_gpu_path(layer)
    layer.forward(bottom, top)
    close(top[0].cpu_data, reference(layer.blobs, x, cont, x_static=x_static)[0])


def test_static_input_with_exposed_hidden_state(engine):
    x, cont = data(6)
    rng = np.random.default_rng(7)
    x_static, h0, c0 = (rng.normal(size=s) for s in [(N, 3), (1, N, D), (1, N, D)])
    layer, bottom, top = set_up(lstm("expose_hidden: true"), [x, cont, x_static, h0, c0], 3)
    assert_gpu_path(layer)
    layer.forward(bottom, top)
    h, h_final, c_final = reference(layer.blobs, x, cont, h0, c0, x_static)
    close(top[0].cpu_data, h)
    close(top[1].cpu_data, h_final)
    close(top[2].cpu_data, c_final)


# (extra param, extra bottoms' shapes, propagate_down): the static input is bottom 2, h_0 and
# c_0 follow it; cont (bottom 1) never gets a gradient
BACKWARD_CASES = [
    ("", [], [True, False]),
    ("", [(N, 3)], [True, False, True]),
    ("expose_hidden: true", [(1, N, D), (1, N, D)], [True, False, False, False]),
    ("expose_hidden: true", [(1, N, D), (1, N, D)], [True, False, True, True]),
    ("expose_hidden: true", [(N, 3), (1, N, D), (1, N, D)], [False, False, True, False, False]),
]


@pytest.mark.parametrize("extra, extra_bottoms, down", BACKWARD_CASES)
def test_forward_backward_match_numpy(engine, extra, extra_bottoms, down):
    """The tops against the numpy LSTM; the gradients of sum(dy * h) for x, x_static and the
    weights against the numpy LSTM's, by central differences in float64. As in Caffe, the
    diffs of the exposed final states h_T, c_T play no part (those tops share only data) and
    the exposed initial states get no gradient."""
    x, cont = data(30)
    rng = np.random.default_rng(31)
    bottoms = [x, cont] + [rng.normal(size=s) for s in extra_bottoms]
    num_tops = 3 if extra else 1
    dy = [rng.normal(size=(T, N, D))] + [rng.normal(size=(1, N, D))] * (num_tops - 1)
    layer, bottom, top = set_up(lstm(extra), bottoms, num_tops, phase=caffe_pb2.TRAIN)
    assert_gpu_path(layer)
    layer.forward(bottom, top)
    # float64 copies of what the layer holds in float32, for the reference
    values = [b.cpu_data.astype(np.float64) for b in bottom]
    weights = [b.cpu_data.astype(np.float64) for b in layer.blobs]
    has_static = len(extra_bottoms) in (1, 3)
    static = values[2] if has_static else None
    h0, c0 = values[-2:] if extra else (None, None)
    expected = reference(weights, values[0], values[1], h0, c0, static)
    for blob, want in zip(top, expected):
        close(blob.cpu_data, want)
    for blob, diff in zip(top, dy):
        blob.diff[...] = diff
    for blob in layer.blobs:
        blob.diff[...] = 0
    states = bottom[2 + has_static:]
    for blob in states:
        blob.diff[...] = 7
    layer.backward(top, down, bottom)

    def loss():
        h = reference(weights, values[0], values[1], h0, c0, static)[0]
        return (dy[0] * h).sum()

    checked = [(f"bottom[{i}]", bottom[i], values[i]) for i in ([0, 2] if has_static else [0])
               if down[i]]
    checked += [(f"param[{i}]", blob, value) for i, (blob, value)
                in enumerate(zip(layer.blobs, weights))]
    grads = numeric_gradients(loss, [value for _, _, value in checked])
    for (name, blob, _), want in zip(checked, grads):
        np.testing.assert_allclose(blob.cpu_diff, want, rtol=1e-5, atol=1e-5, err_msg=name)
    for blob in states:
        np.testing.assert_array_equal(blob.cpu_diff, 7)


# The GPU case (the simulator is slow): one short sequence, fewer probes, the bottom only (the
# weights' gradients are checked against numpy's in test_forward_backward_match_numpy).
@pytest.mark.parametrize("engine, sizes, extra_bottoms, check, quick", engine_cases(
    [((8, T, N, (I,)), [], [0], False), ((8, T, N, (I,)), [(N, 3)], [0, 2], False)],
    [((33, 2, 1, (2,)), [], [0], True)], unpack=True), indirect=["engine"])
def test_gradient(engine, sizes, extra_bottoms, check, quick):
    seed, t, n, feature_shape = sizes
    x, cont = data(seed, t=t, n=n, feature_shape=feature_shape)
    rng = np.random.default_rng(9)
    layer, bottom, top = set_up(lstm(), [x, cont] + [rng.normal(size=s) for s in extra_bottoms])
    options = dict(check_params=False, directions=2, elements=3) if quick else {}
    check_gradient(layer, bottom, top, check_bottom=check, threshold=1e-3, **options)


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


def test_one_timestep_at_a_time_gives_the_same_sequence(engine):
    """Caffe's TestForward: the carried-over state makes T=1 batches equal one T=3 batch."""
    x, cont = data(16)
    layer, bottom, top = set_up(lstm(), [x, cont])
    layer.forward(bottom, top)
    whole = top[0].cpu_data.copy()
    for t in range(T):
        step = [Blob((1, N, I)), Blob((1, N))]
        step[0].data[...] = x[t:t + 1]
        step[1].data[...] = cont[t:t + 1]
        layer.forward(step, top)
        np.testing.assert_allclose(top[0].cpu_data[0], whole[t], rtol=1e-5, atol=1e-6)


def test_state_carries_over_and_unrolls_again(engine):
    """A T=3 batch, then its timesteps one batch at a time with cont 1 (the layer unrolls again
    for T=1 and carries the state over), then backward through the last step: the tops
    against the numpy LSTM continued from the carried state, the gradients against its
    central differences."""
    x, cont = data(32)
    layer, bottom, top = set_up(lstm(), [x, cont])
    assert_gpu_path(layer)
    weights = [b.cpu_data.astype(np.float64) for b in layer.blobs]
    layer.forward(bottom, top)
    h, h_state, c_state = reference(weights, x, cont)
    close(top[0].cpu_data, h)
    ones = np.ones((1, N))
    for t in range(T):
        step = [Blob((1, N, I)), Blob((1, N))]
        step[0].data[...] = x[t:t + 1]
        step[1].data[...] = 1
        layer.forward(step, top)
        h0, c0 = h_state, c_state
        h, h_state, c_state = reference(weights, x[t:t + 1], ones, h0, c0)
        close(top[0].cpu_data, h)
    top[0].diff[...] = 1
    for blob in layer.blobs:
        blob.diff[...] = 0
    layer.backward(top, [True, False], step)
    x_step = step[0].cpu_data.astype(np.float64)
    grads = numeric_gradients(lambda: reference(weights, x_step, ones, h0, c0)[0].sum(),
                              [x_step] + weights)
    for name, blob, want in zip(["bottom[0]", "W_xc", "b_c", "W_hc"], [step[0]] + layer.blobs,
                                grads):
        np.testing.assert_allclose(blob.cpu_diff, want, rtol=1e-5, atol=1e-5, err_msg=name)


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
        assert net.layer_entries[net.layer_id(name)].bottom_need_backward == [True, False]


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
    for param in tested.net.param_entries:
        assert param.blob.shares_data_with(trained.blobs[param.learnable_id])
