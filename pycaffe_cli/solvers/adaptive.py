"""AdaGrad and RMSProp: one family, scaling the step by a history of squared gradients.

    AdaGrad:  h = h + g^2                                  (a running sum)
    RMSProp:  h = rms_decay * h + (1 - rms_decay) * g^2    (a running mean)
    both:     step = local_rate * g / (sqrt(h) + delta)

Each keeps the operation order of its own formula (Caffe's adagrad_solver.cpp and
rmsprop_solver.cpp), chosen by ``running_mean``; one per-element body serves the CPU driver
and the CUDA kernel (see update.py). Neither takes momentum.
"""
import math

import numpy as np
from numba import cuda, njit, prange

from pycaffe_cli.cuda.device import device_function
from pycaffe_cli.solvers.base import Solver, register_solver
from pycaffe_cli.solvers.param_checks import check_decay, check_delta, refuse
from pycaffe_cli.solvers.update import PARALLEL_MIN, ElementwiseRule

_ONE = np.float32(1)


def squared_gradient_at_py(diff, history, local_rate, rms_decay, delta, running_mean, i):
    """history[i] = h (AdaGrad's sum or RMSProp's mean); diff[i] = lr * g / (sqrt(h) + delta)."""
    g = diff[i]
    if running_mean:
        h = history[i] * rms_decay + (_ONE - rms_decay) * (g * g)
    else:
        h = history[i] + g * g
    history[i] = h
    diff[i] = local_rate * (g / (math.sqrt(h) + delta))


_squared_gradient = njit(cache=True, inline="always")(squared_gradient_at_py)
_squared_gradient_cuda = device_function(squared_gradient_at_py)


@njit(cache=True, parallel=True, nogil=True)
def squared_gradient_update(diff, history, local_rate, rms_decay, delta, running_mean):
    """One AdaGrad (``running_mean`` False) or RMSProp step over flat float32 arrays."""
    if diff.size < PARALLEL_MIN:
        for i in range(diff.size):
            _squared_gradient(diff, history, local_rate, rms_decay, delta, running_mean, i)
    else:
        for i in prange(diff.size):
            _squared_gradient(diff, history, local_rate, rms_decay, delta, running_mean, i)


@cuda.jit(cache=True)
def _squared_gradient_kernel(n, diff, history, local_rate, rms_decay, delta, running_mean):
    """h = h + g^2 or rms_decay h + (1 - rms_decay) g^2; diff = lr g / (sqrt(h) + delta)."""
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        _squared_gradient_cuda(diff, history, local_rate, rms_decay, delta, running_mean, i)


SQUARED_GRADIENT_RULE = ElementwiseRule(squared_gradient_update, _squared_gradient_kernel)


class SquaredGradientSolver(Solver):
    """One history blob per param: the sum (AdaGrad) or running mean (RMSProp) of g^2."""

    running_mean = False

    def check_solver_param(self, param):
        if param.momentum != 0:   # Caffe: CHECK_EQ(0, momentum)
            raise refuse(param, "momentum", f"Momentum cannot be used with {self.type}")
        check_delta(param, self.type, "sqrt(h) + delta")

    def compute_update_value(self, param_id, rate):
        self.run_rule(SQUARED_GRADIENT_RULE, self.diff_of(param_id), self.history_of(param_id),
                      self.local_rate(param_id, rate), np.float32(self.param.rms_decay),
                      np.float32(self.param.delta), self.running_mean)


@register_solver("AdaGrad")
class AdaGradSolver(SquaredGradientSolver):
    """Caffe's AdaGradSolver: h = h + g^2."""


@register_solver("RMSProp")
class RMSPropSolver(SquaredGradientSolver):
    """Caffe's RMSPropSolver: h = rms_decay * h + (1 - rms_decay) * g^2."""

    running_mean = True

    def check_solver_param(self, param):
        super().check_solver_param(param)
        # Caffe: CHECK_GE(rms_decay, 0), CHECK_LT(rms_decay, 1)
        check_decay(param, "rms_decay", "RMSProp's rms_decay")
