"""Each update rule's compiled body against a plain-numpy reference.

The references are the array formulations the rules had before their bodies were written once
for both targets (float32 throughout, Caffe's operation order). The CPU driver must give the
same bits on both of its paths (serial and ``prange``: one compiled body, one instruction
sequence). The CUDA kernel runs on a size that makes every thread of the test grid loop; a real
GPU's compiler fuses multiply-adds (as nvcc does for Caffe's own kernels), skipping roundings
the numpy reference makes, so there it agrees within a bound derived below, not to the bit.
"""
import numpy as np
import pytest
from numba import cuda

from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.solvers import adadelta, adam, adaptive, sgd
from pycaffe_cli.solvers.update import PARALLEL_MIN

f32 = np.float32
ONE = f32(1)


def sgd_reference(diff, history, local_rate, momentum, nesterov):
    previous = history.copy()
    history *= momentum
    history += local_rate * diff
    diff[:] = (ONE + momentum) * history - momentum * previous if nesterov else history


def squared_gradient_reference(diff, history, local_rate, rms_decay, delta, running_mean):
    if running_mean:
        history *= rms_decay
        history += (ONE - rms_decay) * (diff * diff)
    else:
        history += diff * diff
    diff[:] = local_rate * (diff / (np.sqrt(history) + delta))


def adadelta_reference(diff, grad_history, update_history, local_rate, momentum, delta):
    one_minus = ONE - momentum
    grad_history *= momentum
    grad_history += one_minus * (diff * diff)
    diff *= np.sqrt((update_history + delta) / (grad_history + delta))
    update_history *= momentum
    update_history += one_minus * (diff * diff)
    diff *= local_rate


def adam_reference(diff, m, v, beta1, beta2, eps_hat, scale):
    m *= beta1
    m += (ONE - beta1) * diff
    v *= beta2
    v += (ONE - beta2) * (diff * diff)
    diff[:] = scale * (m / (np.sqrt(v) + eps_hat))


CASES = {
    "sgd": (sgd.SGD_RULE, sgd_reference, 1, (f32(0.01), f32(0.9), False)),
    "nesterov": (sgd.SGD_RULE, sgd_reference, 1, (f32(0.01), f32(0.95), True)),
    "adagrad": (adaptive.SQUARED_GRADIENT_RULE, squared_gradient_reference, 1,
                (f32(0.01), f32(0.99), f32(1e-6), False)),
    "rmsprop": (adaptive.SQUARED_GRADIENT_RULE, squared_gradient_reference, 1,
                (f32(0.01), f32(0.98), f32(1e-6), True)),
    "adadelta": (adadelta.ADADELTA_RULE, adadelta_reference, 2,
                 (f32(1.0), f32(0.95), f32(1e-6))),
    "adam": (adam.ADAM_RULE, adam_reference, 2,
             (f32(0.9), f32(0.999), f32(1e-8), f32(0.001) * adam.adam_correction(0.9, 0.999, 3))),
}


def arrays(size, histories, seed=0):
    """A gradient and non-negative histories (squared-gradient histories are never negative)."""
    rng = np.random.default_rng(seed)
    diff = rng.standard_normal(size).astype(f32)
    return [diff] + [np.abs(rng.standard_normal(size)).astype(f32) for _ in range(histories)]


def run_twice(step, size, histories, scalars):
    """Two steps (the second sees the histories the first wrote); the arrays after each."""
    state = arrays(size, histories)
    results = []
    for seed in (1, 2):
        state[0] = arrays(size, 0, seed)[0]
        step(state, scalars)
        results.append([array.copy() for array in state])
    return results


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("size", [1000, PARALLEL_MIN + 37])
def test_cpu_driver_matches_numpy_bit_for_bit(name, size):
    rule, reference, histories, scalars = CASES[name]
    expected = run_twice(lambda state, s: reference(*state, *s), size, histories, scalars)
    got = run_twice(lambda state, s: rule.cpu(*state, *s), size, histories, scalars)
    for want, have in zip(expected, got):
        for a, b in zip(want, have):
            np.testing.assert_array_equal(b, a)


# Every rule body rounds at most 8 float32 operations per element and step; fusing a multiply
# into an add skips one rounding, a change of at most eps/2 of the larger operand's magnitude.
# Over the two steps compared (the second starts from the first's histories) the two
# evaluations then differ by at most 2 * 8 * eps relative to the values involved: elementwise
# for the products and quotients, and relative to the array's largest magnitude where a sum of
# terms of the same array's scale cancels.
FUSED_ROUNDINGS = 2 * 8
FUSED_RTOL = FUSED_ROUNDINGS * float(np.finfo(f32).eps)


@pytest.mark.usefixtures("gpu_mode")
@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_kernel_matches_numpy_within_fused_roundings(name):
    rule, reference, histories, scalars = CASES[name]

    def on_device(state, s):
        device = [cuda.to_device(array) for array in state]
        launch(rule.gpu, state[0].size, *device, *s)
        for array, copy in zip(state, device):
            array[:] = copy.copy_to_host()

    expected = run_twice(lambda state, s: reference(*state, *s), 300, histories, scalars)
    got = run_twice(on_device, 300, histories, scalars)
    for want, have in zip(expected, got):
        for a, b in zip(want, have):
            scale = float(np.abs(a).max())
            np.testing.assert_allclose(b, a, rtol=FUSED_RTOL, atol=FUSED_RTOL * scale)
