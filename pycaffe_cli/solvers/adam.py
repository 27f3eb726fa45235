"""Adam (Caffe's AdamSolver; Kingma & Ba, arXiv:1412.6980).

    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g^2
    step = local_rate * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps_hat)

at t = iter + 1. The bias correction is one float32 scale per step (``adam_correction``);
one per-element body serves the CPU driver and the CUDA kernel (see update.py).
"""
import math

import numpy as np
from numba import cuda, njit, prange

from pycaffe_cli.cuda.device import device_function
from pycaffe_cli.solvers.base import Solver, register_solver
from pycaffe_cli.solvers.param_checks import check_decay, check_delta
from pycaffe_cli.solvers.update import PARALLEL_MIN, ElementwiseRule

_ONE = np.float32(1)


def adam_correction(beta1, beta2, t):
    """sqrt(1 - beta2^t) / (1 - beta1^t), computed in double and stored as float as in Caffe."""
    return np.float32(math.sqrt(1.0 - math.pow(beta2, t)) / (1.0 - math.pow(beta1, t)))


def adam_at_py(diff, m, v, beta1, beta2, eps_hat, scale, i):
    """Update m[i], v[i]; diff[i] = scale * m / (sqrt(v) + eps_hat), scale = lr * correction."""
    g = diff[i]
    mi = m[i] * beta1 + (_ONE - beta1) * g
    vi = v[i] * beta2 + (_ONE - beta2) * (g * g)
    m[i] = mi
    v[i] = vi
    diff[i] = scale * (mi / (math.sqrt(vi) + eps_hat))


_adam = njit(cache=True, inline="always")(adam_at_py)
_adam_cuda = device_function(adam_at_py)


@njit(cache=True, parallel=True, nogil=True)
def adam_update(diff, m, v, beta1, beta2, eps_hat, scale):
    """One Adam step over flat float32 arrays (``diff``: g in, the step out)."""
    if diff.size < PARALLEL_MIN:
        for i in range(diff.size):
            _adam(diff, m, v, beta1, beta2, eps_hat, scale, i)
    else:
        for i in prange(diff.size):
            _adam(diff, m, v, beta1, beta2, eps_hat, scale, i)


@cuda.jit(cache=True)
def _adam_kernel(n, diff, m, v, beta1, beta2, eps_hat, scale):
    """m, v moving averages of g, g^2; diff = scale * m / (sqrt(v) + eps_hat)."""
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        _adam_cuda(diff, m, v, beta1, beta2, eps_hat, scale, i)


ADAM_RULE = ElementwiseRule(adam_update, _adam_kernel)


@register_solver("Adam")
class AdamSolver(Solver):
    """Two history blobs per param: the first moments m, then the second moments v.

    beta1 is ``momentum``, beta2 ``momentum2`` and eps_hat ``delta``.
    """

    history_per_param = 2

    def check_solver_param(self, param):
        # beta1 = 1 divides the bias correction by 0; beta2 >= 1 takes sqrt(1 - beta2^t) of
        # 0 or less; with delta 0 a zero gradient gives 0 / 0.
        check_decay(param, "momentum", "Adam's beta1 (momentum)")
        check_decay(param, "momentum2", "Adam's beta2 (momentum2)")
        check_delta(param, "Adam", "sqrt(v) + delta")

    def compute_update_value(self, param_id, rate):
        beta1 = np.float32(self.param.momentum)
        beta2 = np.float32(self.param.momentum2)
        scale = self.local_rate(param_id, rate) * adam_correction(float(beta1), float(beta2),
                                                                  self.iter + 1)
        self.run_rule(ADAM_RULE, self.diff_of(param_id), self.history_of(param_id, 0),
                      self.history_of(param_id, 1), beta1, beta2, np.float32(self.param.delta),
                      scale)
