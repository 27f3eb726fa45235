"""AdaDelta (Caffe's AdaDeltaSolver): Zeiler's AdaDelta with a learning rate.

    h_g = momentum * h_g + (1 - momentum) * g^2
    u   = g * sqrt((h_u + delta) / (h_g + delta))
    h_u = momentum * h_u + (1 - momentum) * u^2
    step = local_rate * u

One per-element body for the CPU driver and the CUDA kernel (see update.py).
"""
import math

import numpy as np
from numba import cuda, njit, prange

from pycaffe_cli.cuda.device import device_function
from pycaffe_cli.solvers.base import Solver, register_solver
from pycaffe_cli.solvers.param_checks import check_decay, check_delta
from pycaffe_cli.solvers.update import PARALLEL_MIN, ElementwiseRule

_ONE = np.float32(1)


def adadelta_at_py(diff, grad_history, update_history, local_rate, momentum, delta, i):
    """Update both histories at i; diff[i] = local_rate * u (the module doc's formulas)."""
    one_minus = _ONE - momentum
    g = diff[i]
    hg = grad_history[i] * momentum + one_minus * (g * g)
    grad_history[i] = hg
    u = g * math.sqrt((update_history[i] + delta) / (hg + delta))
    update_history[i] = update_history[i] * momentum + one_minus * (u * u)
    diff[i] = u * local_rate


_adadelta = njit(cache=True, inline="always")(adadelta_at_py)
_adadelta_cuda = device_function(adadelta_at_py)


@njit(cache=True, parallel=True, nogil=True)
def adadelta_update(diff, grad_history, update_history, local_rate, momentum, delta):
    """One AdaDelta step over flat float32 arrays (``diff``: g in, the step out)."""
    if diff.size < PARALLEL_MIN:
        for i in range(diff.size):
            _adadelta(diff, grad_history, update_history, local_rate, momentum, delta, i)
    else:
        for i in prange(diff.size):
            _adadelta(diff, grad_history, update_history, local_rate, momentum, delta, i)


@cuda.jit(cache=True)
def _adadelta_kernel(n, diff, grad_history, update_history, local_rate, momentum, delta):
    """h_g, u = g sqrt((h_u + delta) / (h_g + delta)), h_u; diff = local_rate * u."""
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        _adadelta_cuda(diff, grad_history, update_history, local_rate, momentum, delta, i)


ADADELTA_RULE = ElementwiseRule(adadelta_update, _adadelta_kernel)


@register_solver("AdaDelta")
class AdaDeltaSolver(Solver):
    """Two history blobs per param: squared gradients, then squared updates (Caffe's order)."""

    history_per_param = 2

    def check_solver_param(self, param):
        # momentum > 1 makes 1 - momentum negative, and the square root of a negative
        # history nan; with delta 0 the first update is 0 * g, and every later one too.
        check_decay(param, "momentum", "AdaDelta's momentum (the histories' decay)")
        check_delta(param, "AdaDelta", "the gradient history + delta")

    def compute_update_value(self, param_id, rate):
        self.run_rule(ADADELTA_RULE, self.diff_of(param_id), self.history_of(param_id, 0),
                      self.history_of(param_id, 1), self.local_rate(param_id, rate),
                      np.float32(self.param.momentum), np.float32(self.param.delta))
