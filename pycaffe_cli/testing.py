"""Finite-difference gradient checking for layers (Caffe's GradientChecker).

The objective is ``f = sum_t <R_t, top_t.data>`` for fixed random weights ``R_t`` (so the top
diffs are simply ``R_t``). The analytic gradient from ``backward`` is compared with central
differences ``(f(x + h v) - f(x - h v)) / 2h``:

* ``mode="random"`` (default): along a few random directions ``v`` over the whole blob, plus a
  few single elements; fast for any shape.
* ``mode="exhaustive"``: along every unit vector, as Caffe's CheckGradientExhaustive does;
  for tiny shapes.

A pair passes when ``|analytic - numeric| <= threshold * max(|analytic|, |numeric|, 1)``.
Elements within ``kink_range`` of ``kink`` (non-differentiable points such as ReLU's 0) are
left out. The random source is re-seeded before every forward so stochastic layers (Dropout)
see the same randomness each time.

In GPU mode the analytic gradient comes from the GPU's forward and backward. The finite
differences need two forwards per probe; by default (``numeric_engine="cpu"``) they run on the
CPU engine, after checking that the CPU's forward gives the GPU's tops at the unperturbed point
(so the GPU's backward is still checked against finite differences of the layer's function,
and numba's CUDA simulator runs two GPU forwards per check instead of dozens).
``numeric_engine="same"`` runs them in the current mode, as Caffe's GradientChecker does: for
layers whose GPU random draws differ from the CPU's.
"""
import contextlib

import numpy as np

from pycaffe_cli import backend


class GradientCheckFailure(AssertionError):
    """Raised when an analytic gradient disagrees with its numerical estimate."""


def check_gradient(layer, bottom, top, check_bottom=None, check_params=True, stepsize=1e-2,
                   threshold=1e-2, seed=1701, kink=0.0, kink_range=-1.0, mode="random",
                   directions=3, elements=8, numeric_engine="cpu"):
    """Check ``layer``'s backward against finite differences. The layer must be set up.

    Args:
        layer: a set-up Layer.
        bottom, top: the blob lists the layer was set up with.
        check_bottom: indices of bottoms to check (default: all).
        check_params: also check the layer's learnable blobs.
        stepsize, threshold, kink, kink_range: as in Caffe's GradientChecker.
        seed: the random seed set before every forward.
        mode: "random" or "exhaustive".
        directions, elements: how many random directions / single elements (random mode).
        numeric_engine: in GPU mode, "cpu" or "same": where the finite differences run.

    Raises:
        GradientCheckFailure: with the blob, element and both values.
    """
    check_bottom = range(len(bottom)) if check_bottom is None else check_bottom
    checked = [(f"bottom[{i}]", bottom[i]) for i in check_bottom]
    if check_params:
        checked += [(f"param[{i}]", blob) for i, blob in enumerate(layer.blobs)]
    propagate_down = [i in check_bottom for i in range(len(bottom))]
    weights = _top_weights(layer, bottom, top, seed)
    analytic = _analytic_gradients(layer, bottom, top, weights, propagate_down, checked, seed)
    probe = np.random.default_rng(seed + 1)
    with _numeric_mode(numeric_engine, layer, bottom, top, seed):
        for (label, blob), grad in zip(checked, analytic):
            for v, where in _probe_directions(blob, mode, directions, elements, kink,
                                              kink_range, probe):
                numeric = _directional_difference(layer, bottom, top, weights, blob, v,
                                                  stepsize, seed)
                computed = float(np.dot(grad.ravel().astype(np.float64), v.ravel()))
                scale = max(abs(computed), abs(numeric), 1.0)
                if abs(computed - numeric) > threshold * scale:
                    raise GradientCheckFailure(
                        f"{layer.type} layer {layer.name!r}: {label} {where}: analytic "
                        f"{computed:.6g} vs numeric {numeric:.6g} (threshold {threshold} x "
                        f"{scale:.3g})")


FORWARD_AGREEMENT = 1e-4   # |gpu - cpu| <= this x max(|gpu|, |cpu|, 1), element by element


@contextlib.contextmanager
def _numeric_mode(numeric_engine, layer, bottom, top, seed):
    """The mode the finite differences run in (see the module's docstring)."""
    if numeric_engine not in ("cpu", "same"):
        raise ValueError(f"numeric_engine must be 'cpu' or 'same', got {numeric_engine!r}")
    if numeric_engine == "same" or backend.mode() is not backend.Mode.GPU:
        yield
        return
    device = backend.device()
    gpu_tops = [blob.cpu_data.astype(np.float64) for blob in top]
    backend.set_mode_cpu()
    try:
        _forward(layer, bottom, top, seed)
        _check_forwards_agree(layer, top, gpu_tops)
        yield
    finally:
        backend.set_mode_gpu(device)


def _check_forwards_agree(layer, top, gpu_tops):
    for i, (blob, gpu) in enumerate(zip(top, gpu_tops)):
        cpu = blob.cpu_data.astype(np.float64)
        allowed = FORWARD_AGREEMENT * np.maximum(np.maximum(np.abs(gpu), np.abs(cpu)), 1.0)
        bad = np.flatnonzero(np.abs(gpu - cpu).ravel() > allowed.ravel())
        if bad.size:
            where = np.unravel_index(bad[0], blob.shape)
            raise GradientCheckFailure(
                f"{layer.type} layer {layer.name!r}: top[{i}] at {where}: the GPU's forward "
                f"gives {gpu[where]:.8g}, the CPU's {cpu[where]:.8g}, so the CPU cannot stand "
                "in for the GPU's finite differences (numeric_engine='same' runs them on the "
                "GPU)")


def _forward(layer, bottom, top, seed):
    backend.set_random_seed(seed)
    layer.forward(bottom, top)


def _top_weights(layer, bottom, top, seed):
    _forward(layer, bottom, top, seed)
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, blob.shape).astype(np.float32) for blob in top]


def _objective(top, weights):
    return sum(float(np.dot(b.flat_data.astype(np.float64), w.ravel()))
               for b, w in zip(top, weights))


def _analytic_gradients(layer, bottom, top, weights, propagate_down, checked, seed):
    _forward(layer, bottom, top, seed)
    for blob in layer.blobs:
        blob.diff[...] = 0
    for i, blob in enumerate(bottom):
        if propagate_down[i]:
            blob.diff[...] = 0
    # Top diffs last: a top may share its diff with a bottom (in place, Flatten, Reshape).
    for blob, w in zip(top, weights):
        blob.diff[...] = w
    layer.backward(top, propagate_down, bottom)
    return [blob.diff.copy() for _, blob in checked]


def _probe_directions(blob, mode, directions, elements, kink, kink_range, rng):
    """Yield (direction, description) pairs, with kink elements masked out."""
    smooth = np.abs(blob.data - kink) > kink_range
    if mode == "exhaustive":
        for index in zip(*np.nonzero(smooth)):
            v = np.zeros(blob.shape)
            v[index] = 1.0
            yield v, f"element {tuple(int(i) for i in index)}"
        return
    for k in range(directions):
        v = rng.uniform(-1.0, 1.0, blob.shape) * smooth
        yield v, f"random direction {k}"
    candidates = np.flatnonzero(smooth)
    for flat in rng.choice(candidates, size=min(elements, candidates.size), replace=False):
        v = np.zeros(blob.count())
        v[flat] = 1.0
        yield v.reshape(blob.shape), f"element {np.unravel_index(flat, blob.shape)}"


def _directional_difference(layer, bottom, top, weights, blob, v, stepsize, seed):
    original = blob.data.copy()
    blob.data[...] = original + stepsize * v
    _forward(layer, bottom, top, seed)
    plus = _objective(top, weights)
    blob.data[...] = original - stepsize * v
    _forward(layer, bottom, top, seed)
    minus = _objective(top, weights)
    blob.data[...] = original
    return (plus - minus) / (2.0 * stepsize)
