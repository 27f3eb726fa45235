"""AdaDelta (Caffe's AdaDeltaSolver)."""
import numpy as np

from pycaffe_cli.solvers.base import Solver, register_solver


def adadelta_update(diff, grad_history, update_history, local_rate, momentum, delta):
    """Zeiler's AdaDelta with a learning rate, in place on flat float32 arrays.

    h_g <- momentum * h_g + (1 - momentum) * g^2
    u   =  g * sqrt((h_u + delta) / (h_g + delta))
    h_u <- momentum * h_u + (1 - momentum) * u^2
    step = local_rate * u
    """
    one_minus = np.float32(1) - momentum
    grad_history *= momentum
    grad_history += one_minus * (diff * diff)
    diff *= np.sqrt((update_history + delta) / (grad_history + delta))
    update_history *= momentum
    update_history += one_minus * (diff * diff)
    diff *= local_rate


@register_solver("AdaDelta")
class AdaDeltaSolver(Solver):
    """Two history blobs per param: squared gradients, then squared updates (Caffe's order)."""

    history_per_param = 2

    def compute_update_value(self, param_id, rate):
        update = self.update_function(adadelta_update)
        update(self.diff_of(param_id), self.history_of(param_id, 0), self.history_of(param_id, 1),
               self.local_rate(param_id, rate), np.float32(self.param.momentum),
               np.float32(self.param.delta))
