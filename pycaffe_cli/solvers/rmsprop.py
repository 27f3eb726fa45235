"""RMSProp (Caffe's RMSPropSolver)."""
import numpy as np

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.solvers.base import Solver, register_solver


def rmsprop_update(diff, history, local_rate, rms_decay, delta):
    """h <- rms_decay * h + (1 - rms_decay) * g^2;  step = local_rate * g / (sqrt(h) + delta)

    In place on flat float32 arrays: ``diff`` holds g on entry and the step on exit.
    """
    history *= rms_decay
    history += (np.float32(1) - rms_decay) * (diff * diff)
    diff[:] = local_rate * (diff / (np.sqrt(history) + delta))


@register_solver("RMSProp")
class RMSPropSolver(Solver):
    """One history blob (the running mean square) per param; momentum must be 0."""

    def check_solver_param(self, param):
        if param.momentum != 0:
            raise CaffeError(f"Momentum cannot be used with RMSProp (momentum: "
                             f"{param.momentum:g}).")
        if not 0 <= param.rms_decay < 1:
            raise CaffeError(f"rms_decay should lie between 0 and 1 (got {param.rms_decay:g}).")

    def compute_update_value(self, param_id, rate):
        update = self.update_function(rmsprop_update)
        update(self.diff_of(param_id), self.history_of(param_id), self.local_rate(param_id, rate),
               np.float32(self.param.rms_decay), np.float32(self.param.delta))
