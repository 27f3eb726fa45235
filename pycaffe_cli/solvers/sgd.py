"""Stochastic gradient descent with momentum, plain or Nesterov (Caffe's SGD/Nesterov).

    SGD:       h' = momentum * h + local_rate * g;  step = h'
    Nesterov:  h' = momentum * h + local_rate * g;  step = (1 + momentum) * h' - momentum * h

One per-element body (``sgd_at_py``) for the CPU driver and the CUDA kernel (see update.py).
"""
import numpy as np
from numba import cuda, njit, prange

from pycaffe_cli.cuda.device import device_function
from pycaffe_cli.solvers.base import Solver, register_solver
from pycaffe_cli.solvers.param_checks import check_decay
from pycaffe_cli.solvers.update import PARALLEL_MIN, ElementwiseRule

_ONE = np.float32(1)


def sgd_at_py(diff, history, local_rate, momentum, nesterov, i):
    """history[i] = momentum * history[i] + local_rate * diff[i]; diff[i] = the step."""
    previous = history[i]
    updated = previous * momentum + local_rate * diff[i]
    history[i] = updated
    if nesterov:
        diff[i] = (_ONE + momentum) * updated - momentum * previous
    else:
        diff[i] = updated


_sgd = njit(cache=True, inline="always")(sgd_at_py)
_sgd_cuda = device_function(sgd_at_py)


@njit(cache=True, parallel=True, nogil=True)
def sgd_update(diff, history, local_rate, momentum, nesterov):
    """One momentum step over flat float32 arrays: ``diff`` holds g on entry, the step on
    exit (float32 scalars, bool ``nesterov``)."""
    if diff.size < PARALLEL_MIN:
        for i in range(diff.size):
            _sgd(diff, history, local_rate, momentum, nesterov, i)
    else:
        for i in prange(diff.size):
            _sgd(diff, history, local_rate, momentum, nesterov, i)


@cuda.jit(cache=True)
def _sgd_kernel(n, diff, history, local_rate, momentum, nesterov):
    """h' = momentum * h + local_rate * g; diff = h', or (1 + momentum) h' - momentum h."""
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        _sgd_cuda(diff, history, local_rate, momentum, nesterov, i)


SGD_RULE = ElementwiseRule(sgd_update, _sgd_kernel)


@register_solver("SGD")
class SGDSolver(Solver):
    """Caffe's SGDSolver: one history blob (the momentum) per param."""

    nesterov = False

    def check_solver_param(self, param):
        # momentum >= 1 makes the history (and the steps) grow without bound
        check_decay(param, "momentum", f"{self.type}'s momentum")

    def compute_update_value(self, param_id, rate):
        self.run_rule(SGD_RULE, self.diff_of(param_id), self.history_of(param_id),
                      self.local_rate(param_id, rate), np.float32(self.param.momentum),
                      self.nesterov)


@register_solver("Nesterov")
class NesterovSolver(SGDSolver):
    """Caffe's NesterovSolver: SGD with Nesterov's look-ahead momentum."""

    nesterov = True
