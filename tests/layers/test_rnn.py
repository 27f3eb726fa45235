"""RNN: the unrolled net against a numpy recurrence and its backpropagation through time, state
carried between batches, cont resets, exposed hidden state, static input, gradients, Caffe's
blob order, reshapes, errors; on both engines, and the GPU's state carried on the device."""
import logging

import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.blob import Blob
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG
from pycaffe_cli.testing import check_gradient
from tests.gpu_helpers import engine_cases
from tests.layer_helpers import set_up

T, N, IN, D = 3, 2, 4, 4


def rnn(extra="", name="rnn"):
    return (f'name: "{name}" type: "RNN" recurrent_param {{ num_output: {D} '
            f'weight_filler {{ type: "uniform" min: -0.5 max: 0.5 }} '
            f'bias_filler {{ type: "uniform" min: -0.5 max: 0.5 }} {extra} }}')


def reference(blobs, x, cont, h0=None, x_static=None):
    """o (T, N, D) and h_T from h_t = tanh(W_hh cont_t h_{t-1} + W_xh x_t + b_h [+ static])."""
    w = [b.data.astype(np.float64) for b in blobs]
    if x_static is not None:
        w_xh, b_h, w_static, w_hh, w_ho, b_o = w
        static = x_static.reshape(x_static.shape[0], -1) @ w_static.T
    else:
        (w_xh, b_h, w_hh, w_ho, b_o), static = w, 0.0
    h = np.zeros((x.shape[1], D)) if h0 is None else h0.reshape(-1, D).astype(np.float64)
    outputs = []
    for t in range(x.shape[0]):
        h_conted = cont[t][:, None] * h
        h = np.tanh(h_conted @ w_hh.T + x[t].reshape(x.shape[1], -1) @ w_xh.T + b_h + static)
        outputs.append(np.tanh(h @ w_ho.T + b_o))
    return np.stack(outputs), h


def reference_backward(blobs, x, cont, dy, h0=None, x_static=None):
    """Backpropagation through time of ``reference``'s recurrence for the output diffs ``dy``
    (none from the final state, as in Caffe): (dx, dx_static or None, the parameters'
    gradients in the layer's blob order)."""
    w = [b.cpu_data.astype(np.float64) for b in blobs]
    t_steps, n = x.shape[:2]
    xs = np.asarray(x, np.float32).astype(np.float64).reshape(t_steps, n, -1)
    if x_static is not None:
        w_xh, b_h, w_static, w_hh, w_ho, b_o = w
        xs_static = np.asarray(x_static, np.float32).astype(np.float64).reshape(n, -1)
        static = xs_static @ w_static.T
    else:
        (w_xh, b_h, w_hh, w_ho, b_o), static = w, 0.0
    h = np.zeros((n, D)) if h0 is None else np.asarray(h0, np.float32).reshape(-1, D)
    h = h.astype(np.float64)
    steps = []  # (cont_t h_{t-1}, h_t, o_t)
    for t in range(t_steps):
        h_conted = cont[t][:, None] * h
        h = np.tanh(h_conted @ w_hh.T + xs[t] @ w_xh.T + b_h + static)
        steps.append((h_conted, h, np.tanh(h @ w_ho.T + b_o)))
    g_xh, g_bh, g_hh, g_ho, g_bo = (np.zeros_like(a) for a in (w_xh, b_h, w_hh, w_ho, b_o))
    dx, d_static, dh_next = np.zeros_like(xs), np.zeros((n, D)), np.zeros((n, D))
    dy = np.asarray(dy, np.float32).astype(np.float64)
    for t in reversed(range(t_steps)):
        h_conted, h, o = steps[t]
        dz_o = dy[t] * (1 - o ** 2)
        g_ho += dz_o.T @ h
        g_bo += dz_o.sum(axis=0)
        dz_h = (dz_o @ w_ho + dh_next) * (1 - h ** 2)
        g_hh += dz_h.T @ h_conted
        g_xh += dz_h.T @ xs[t]
        g_bh += dz_h.sum(axis=0)
        dx[t] = dz_h @ w_xh
        d_static += dz_h
        dh_next = cont[t][:, None] * (dz_h @ w_hh)
    if x_static is None:
        return dx.reshape(np.shape(x)), None, [g_xh, g_bh, g_hh, g_ho, g_bo]
    dx_static = (d_static @ w_static).reshape(np.shape(x_static))
    return dx.reshape(np.shape(x)), dx_static, [g_xh, g_bh, d_static.T @ xs_static, g_hh,
                                                g_ho, g_bo]


def data(seed, t=T, n=N, feature_shape=(IN,), resets=True):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(t, n) + feature_shape)
    cont = np.ones((t, n))
    if resets:
        cont[0] = 0
        cont[min(2, t - 1), 0] = 0  # stream 0 starts a new sequence mid-batch
    return x, cont


@pytest.fixture(autouse=True)
def seeded():
    backend.set_random_seed(1701)


@pytest.mark.parametrize("feature_shape", [(IN,), (2, 3)])
def test_forward_matches_reference(engine, feature_shape):
    x, cont = data(0, feature_shape=feature_shape)
    layer, bottom, top = set_up(rnn(), [x, cont])
    assert top[0].shape == (T, N, D)
    layer.forward(bottom, top)
    expected, _ = reference(layer.blobs, x, cont)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-6)


def test_blobs_in_caffes_order():
    layer, _, _ = set_up(rnn(), list(data(0)))
    assert [b.shape for b in layer.blobs] == [(D, IN), (D,), (D, D), (D, D), (D,)]
    assert layer.param_propagate_down == [True] * 5
    owners = [p.display_name for p in layer.net.param_entries if p.owner == -1]
    assert owners == ["W_xh", "b_h", "W_hh", "W_ho", "b_o"]
    # every timestep's W_hh shares the first one's storage
    w_hh = [layer.net.layer_by_name(f"rnn_W_hh_h_{t}").blobs[0] for t in range(T)]
    assert all(b.shares_data_with(layer.blobs[2]) for b in w_hh)


def test_unrolled_net_uses_caffes_layer_names():
    layer, _, _ = set_up(rnn(), list(data(0)))
    names = set(layer.net.layer_names)
    for wanted in ["rnn_cont_slice", "rnn_x_transform", "rnn_W_xh_x_slice", "rnn_h_conted_0",
                   "rnn_W_hh_h_0", "rnn_h_input_sum_1", "rnn_h_neuron_1", "rnn_W_ho_h_1",
                   "rnn_o_neuron_3", "rnn_o_concat", "o_pseudoloss"]:
        assert wanted in names


def test_state_carries_over_between_batches_until_cont_resets(engine):
    x, cont = data(1, resets=False)
    layer, bottom, top = set_up(rnn(), [x, cont])
    bottom[1].data[0] = 0
    layer.forward(bottom, top)
    _, h_final = reference(layer.blobs, x, bottom[1].data)
    bottom[1].data[0] = 1  # continue the sequences: h_0 is the last batch's h_T
    layer.forward(bottom, top)
    expected, _ = reference(layer.blobs, x, cont, h0=h_final)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-6)
    # backward from the carried state: no gradient flows into it
    dy = np.random.default_rng(23).normal(size=(T, N, D)).astype(np.float32)
    top[0].diff[...] = dy
    for blob in layer.blobs:
        blob.diff[...] = 0
    layer.backward(top, [True, False], bottom)
    dx, _, param_grads = reference_backward(layer.blobs, x, cont, dy, h0=h_final)
    for got, want in zip([bottom[0]] + layer.blobs, [dx] + param_grads):
        np.testing.assert_allclose(got.cpu_diff, want, rtol=1e-5, atol=1e-5)
    bottom[1].data[0] = 0  # a reset forgets it again
    layer.forward(bottom, top)
    expected, _ = reference(layer.blobs, x, bottom[1].data)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-6)


def test_expose_hidden(engine):
    x, cont = data(2, resets=False)
    h0 = np.random.default_rng(3).normal(size=(1, N, D))
    layer, bottom, top = set_up(rnn("expose_hidden: true"), [x, cont, h0], num_tops=2)
    assert top[1].shape == (1, N, D)
    for _ in range(2):  # no state is carried over: both passes start from h0
        layer.forward(bottom, top)
        expected, h_final = reference(layer.blobs, x, cont, h0=h0)
        np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(top[1].data.reshape(N, D), h_final, rtol=1e-5, atol=1e-6)


def test_static_input():
    x, cont = data(4)
    x_static = np.random.default_rng(5).normal(size=(N, 3))
    layer, bottom, top = set_up(rnn(), [x, cont, x_static])
    assert [b.shape for b in layer.blobs] == [(D, IN), (D,), (D, 3), (D, D), (D, D), (D,)]
    layer.forward(bottom, top)
    expected, _ = reference(layer.blobs, x, cont, x_static=x_static)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-6)


# (extra, extra bottom shapes, propagate_down): static input, exposed hidden state, both
BOTTOM_CASES = [
    ("", [], [True, False]),
    ("", [(N, 3)], [True, False, True]),
    ("", [(N, 3)], [False, False, True]),
    ("expose_hidden: true", [(1, N, D)], [True, False, False]),
    ("expose_hidden: true", [(N, 3), (1, N, D)], [True, False, True, False]),
]


@pytest.mark.parametrize("extra, extra_bottoms, down", BOTTOM_CASES)
def test_forward_and_backward_match_reference(engine, extra, extra_bottoms, down):
    x, cont = data(20)
    rng = np.random.default_rng(21)
    extras = [rng.normal(size=s) for s in extra_bottoms]
    x_static = extras[0] if extra_bottoms[:1] == [(N, 3)] else None
    h0 = extras[-1] if extra else None
    num_tops = 2 if extra else 1
    layer, bottom, top = set_up(rnn(extra), [x, cont] + extras, num_tops=num_tops)
    if engine == "gpu":
        # (its unrolled net's layers without a GPU path yet fall back to the CPU)
        assert layer.forward_gpu is not None and layer.backward_gpu is not None
    layer.forward(bottom, top)
    expected, h_final = reference(layer.blobs, x, cont, h0=h0, x_static=x_static)
    np.testing.assert_allclose(top[0].cpu_data, expected, rtol=1e-5, atol=1e-6)
    if extra:
        np.testing.assert_allclose(top[1].cpu_data.reshape(N, D), h_final, rtol=1e-5,
                                   atol=1e-6)
    dy = rng.normal(size=(T, N, D)).astype(np.float32)
    top[0].diff[...] = dy
    if extra:
        top[1].diff[...] = 0
    for blob in bottom:
        blob.diff[...] = 42
    for blob in layer.blobs:
        blob.diff[...] = 0
    layer.backward(top, down, bottom)
    dx, dx_static, param_grads = reference_backward(layer.blobs, x, cont, dy, h0=h0,
                                                    x_static=x_static)
    wanted = [dx if down[0] else 42, 42]  # none for cont
    if x_static is not None:
        wanted.append(dx_static if down[2] else 42)
    if extra:
        wanted.append(42)  # nor for an exposed h0 (not asked for here)
    assert len(wanted) == len(bottom)
    for index, (blob, want) in enumerate(zip(bottom, wanted)):
        np.testing.assert_allclose(blob.cpu_diff, np.broadcast_to(want, blob.shape),
                                   rtol=1e-5, atol=1e-5, err_msg=f"bottom {index}")
    for index, (blob, want) in enumerate(zip(layer.blobs, param_grads)):
        np.testing.assert_allclose(blob.cpu_diff, want, rtol=1e-5, atol=1e-5,
                                   err_msg=f"param {index}")


# GPU: a smaller net (the simulator runs the unrolled net slowly), the bottom only; the weights'
# gradients are checked against numpy in test_forward_and_backward_match_reference.
@pytest.mark.parametrize("engine, data_args, extra_bottoms, check, options", engine_cases(
    [(dict(seed=6), [], [0], {}), (dict(seed=6), [(N, 3)], [0, 2], {})],
    [(dict(seed=25, t=2, n=1, feature_shape=(2,)), [], [0],
      dict(check_params=False, directions=2, elements=3))], unpack=True),
    indirect=["engine"])
def test_gradient(engine, data_args, extra_bottoms, check, options):
    x, cont = data(**data_args)
    rng = np.random.default_rng(7)
    layer, bottom, top = set_up(rnn(), [x, cont] + [rng.normal(size=s) for s in extra_bottoms])
    check_gradient(layer, bottom, top, check_bottom=check, threshold=1e-3, **options)


def test_gradient_with_exposed_hidden_state():
    x, cont = data(8)
    h0 = np.random.default_rng(9).normal(size=(1, N, D))
    layer, bottom, top = set_up(rnn("expose_hidden: true"), [x, cont, h0], num_tops=2)
    # only the output: like Caffe, no gradient flows back from the final state top
    check_gradient(layer, bottom, top[:1], check_bottom=[0], threshold=1e-3)


def test_no_gradient_written_where_not_asked():
    x, cont = data(10)
    layer, bottom, top = set_up(rnn(), [x, cont])
    layer.forward(bottom, top)
    top[0].diff[...] = 1
    for blob in bottom:
        blob.diff[...] = 42
    layer.backward(top, [False, False], bottom)
    assert np.all(bottom[0].diff == 42) and np.all(bottom[1].diff == 42)
    assert np.any(layer.blobs[0].diff != 0)
    layer.backward(top, [True, False], bottom)
    assert np.all(bottom[0].diff != 42) and np.all(bottom[1].diff == 42)
    assert not layer.allow_force_backward(1)


def test_new_batch_size_and_sequence_length():
    layer, bottom, top = set_up(rnn(), list(data(11)))
    blobs = list(layer.blobs)
    for t, n in [(T, 3), (5, 3), (2, 1)]:
        x, cont = data(12, t=t, n=n)
        bottom = [Blob(x.shape), Blob(cont.shape)]
        bottom[0].data[...] = x
        bottom[1].data[...] = cont
        layer.forward(bottom, top)
        assert top[0].shape == (t, n, D)
        expected, _ = reference(layer.blobs, x, cont)
        np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-6)
    assert all(a is b for a, b in zip(blobs, layer.blobs))


def test_weights_given_new_storage_are_used():
    """Sharing or loading may replace a blob's storage (ShareTrainedLayersWith)."""
    x, cont = data(13)
    layer, bottom, top = set_up(rnn(), [x, cont])
    replacement = Blob((D, D))
    replacement.data[...] = np.eye(D)
    layer.blobs[2].share_data(replacement)  # W_hh
    layer.forward(bottom, top)
    assert np.array_equal(layer.blobs[2].data, np.eye(D))
    expected, _ = reference(layer.blobs, x, cont)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-6)


def blob_text(blob):
    dims = " ".join(f"dim: {d}" for d in blob.shape)
    values = " ".join(f"data: {v!r}" for v in blob.flat_data.tolist())
    return f"blobs {{ shape {{ {dims} }} {values} }}"


def test_blobs_given_with_the_layer_param():
    x, cont = data(14)
    first, bottom, top = set_up(rnn(), [x, cont])
    first.forward(bottom, top)
    expected = top[0].data.copy()
    given = " ".join(blob_text(b) for b in first.blobs)
    backend.set_random_seed(99)
    second, bottom, top = set_up(rnn() + given, [x, cont])
    second.forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, expected)


def test_internal_net_is_quiet_unless_debug_info(caplog):
    x, cont = data(15)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        set_up(rnn(), [x, cont])
    text = caplog.text
    assert "Initializing recurrent layer: assuming input batch contains 3 timesteps of 2 " \
           "independent streams." in text
    assert "Adding parameter 0: W_xh" in text
    assert "Creating Layer rnn_x_transform" not in text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOG.name):
        layer, bottom, top = set_up(rnn("debug_info: true"), [x, cont])
        layer.forward(bottom, top)
    assert "Creating Layer rnn_x_transform" in caplog.text
    assert "[Forward] Layer rnn_o_concat, top blob o data:" in caplog.text


@pytest.mark.parametrize("extra, shapes, message", [
    ("", [(T, N, IN), (T, N + 1)], "bottom\\[1\\] \\(cont\\)"),
    ("", [(T,), (T, N)], "at least 2 axes"),
    ("", [(T, N, IN), (T, N), (N + 1, 2)], "static input"),
    ("expose_hidden: true", [(T, N, IN), (T, N), (1, N, D + 1)], "hidden state input shape"),
])
def test_shape_errors_name_the_layer(extra, shapes, message):
    with pytest.raises(CaffeError, match=f'"rnn".*{message}'):
        set_up(rnn(extra), [np.zeros(s) for s in shapes], num_tops=2 if extra else 1)


def test_num_output_must_be_positive():
    with pytest.raises(CaffeError, match='"r".*num_output must be positive'):
        set_up('name: "r" type: "RNN"', list(data(0)))


def test_blob_counts():
    with pytest.raises(CaffeError, match="at least 3 bottom"):
        set_up(rnn("expose_hidden: true"), list(data(0)), num_tops=2)
    with pytest.raises(CaffeError, match="exactly 1 top"):
        set_up(rnn(), list(data(0)), num_tops=2)


# --- GPU only -------------------------------------------------------------------------------
def test_gpu_state_is_carried_on_the_device(gpu_mode):
    from pycaffe_cli.cuda import memory
    from pycaffe_cli.synced_memory import Head
    layer, bottom, top = set_up(rnn(), list(data(24)))
    final = layer.recurrent_outputs[0]
    memory.fill(final.mutable_gpu_data, 0.25)
    layer._carry_state_gpu()
    assert final.data_memory.head is Head.AT_GPU  # not read back to the host
    start = layer.recurrent_inputs[0]
    assert start.data_memory.head is Head.AT_GPU  # written on the device
    assert np.all(start.cpu_data == np.float32(0.25))
