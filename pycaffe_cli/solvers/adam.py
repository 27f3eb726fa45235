"""Adam (Caffe's AdamSolver; Kingma & Ba, arXiv:1412.6980)."""
import math

import numpy as np

from pycaffe_cli.solvers.base import Solver, register_solver


def adam_correction(beta1, beta2, t):
    """sqrt(1 - beta2^t) / (1 - beta1^t), computed in double and stored as float as in Caffe."""
    return np.float32(math.sqrt(1.0 - math.pow(beta2, t)) / (1.0 - math.pow(beta1, t)))


def adam_update(diff, m, v, local_rate, beta1, beta2, eps_hat, t):
    """One Adam step at t = iter + 1, in place on flat float32 arrays.

    m <- beta1 * m + (1 - beta1) * g
    v <- beta2 * v + (1 - beta2) * g^2
    step = local_rate * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps_hat)
    """
    m *= beta1
    m += (np.float32(1) - beta1) * diff
    v *= beta2
    v += (np.float32(1) - beta2) * (diff * diff)
    scale = local_rate * adam_correction(float(beta1), float(beta2), t)
    diff[:] = scale * (m / (np.sqrt(v) + eps_hat))


@register_solver("Adam")
class AdamSolver(Solver):
    """Two history blobs per param: the first moments m, then the second moments v.

    beta1 is ``momentum``, beta2 ``momentum2`` and eps_hat ``delta``.
    """

    history_per_param = 2

    def compute_update_value(self, param_id, rate):
        update = self.update_function(adam_update)
        update(self.diff_of(param_id), self.history_of(param_id, 0), self.history_of(param_id, 1),
               self.local_rate(param_id, rate), np.float32(self.param.momentum),
               np.float32(self.param.momentum2), np.float32(self.param.delta), self.iter + 1)
