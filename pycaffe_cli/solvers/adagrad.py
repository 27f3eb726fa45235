"""AdaGrad (Caffe's AdaGradSolver)."""
import numpy as np

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.solvers.base import Solver, register_solver


def adagrad_update(diff, history, local_rate, delta):
    """h <- h + g^2;  step = local_rate * g / (sqrt(h) + delta)  (in place, flat float32)."""
    history += diff * diff
    diff[:] = local_rate * (diff / (np.sqrt(history) + delta))


@register_solver("AdaGrad")
class AdaGradSolver(Solver):
    """One history blob (the sum of squared gradients) per param; momentum must be 0."""

    def check_solver_param(self, param):
        if param.momentum != 0:
            raise CaffeError(f"Momentum cannot be used with AdaGrad (momentum: "
                             f"{param.momentum:g}).")

    def compute_update_value(self, param_id, rate):
        update = self.update_function(adagrad_update)
        update(self.diff_of(param_id), self.history_of(param_id), self.local_rate(param_id, rate),
               np.float32(self.param.delta))
