"""Stochastic gradient descent with momentum, plain or Nesterov (Caffe's SGD/Nesterov)."""
import numpy as np

from pycaffe_cli.solvers.base import Solver, register_solver


def sgd_update(diff, history, local_rate, momentum, nesterov=False):
    """One momentum step, in place on flat float32 arrays.

    SGD:       h <- momentum * h + local_rate * g;  step = h
    Nesterov:  h' <- momentum * h + local_rate * g;  step = (1 + momentum) * h' - momentum * h

    ``diff`` holds the gradient g on entry and the step (subtracted from the weights) on exit.
    """
    previous = history.copy() if nesterov else None
    history *= momentum
    history += local_rate * diff
    if nesterov:
        diff[:] = (np.float32(1) + momentum) * history - momentum * previous
    else:
        diff[:] = history


@register_solver("SGD")
class SGDSolver(Solver):
    """Caffe's SGDSolver: one history blob (the momentum) per param."""

    nesterov = False

    def compute_update_value(self, param_id, rate):
        update = self.update_function(sgd_update)
        update(self.diff_of(param_id), self.history_of(param_id), self.local_rate(param_id, rate),
               np.float32(self.param.momentum), self.nesterov)


@register_solver("Nesterov")
class NesterovSolver(SGDSolver):
    """Caffe's NesterovSolver: SGD with Nesterov's look-ahead momentum."""

    nesterov = True
