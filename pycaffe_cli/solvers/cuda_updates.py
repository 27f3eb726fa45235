"""The update rules and regularizers on the device (Caffe's sgd_solvers/*.cu).

Each ``*_update`` has the signature of the CPU function it mirrors (sgd.py, adagrad.py, ...),
with flat float32 device arrays for ``diff`` and the histories, and runs one grid-stride
kernel over the param: ``diff`` holds the gradient on entry and the step on exit. The float32
operations are the CPU functions', in the same order.
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.layers.kernels.cuda.launch import launch

_ONE = np.float32(1)


@cuda.jit(cache=True)
def _sgd_kernel(n, diff, history, local_rate, momentum, nesterov):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        previous = history[i]
        updated = previous * momentum + local_rate * diff[i]
        history[i] = updated
        if nesterov:
            diff[i] = (_ONE + momentum) * updated - momentum * previous
        else:
            diff[i] = updated


@cuda.jit(cache=True)
def _adagrad_kernel(n, diff, history, local_rate, delta):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        g = diff[i]
        h = history[i] + g * g
        history[i] = h
        diff[i] = local_rate * (g / (math.sqrt(h) + delta))


@cuda.jit(cache=True)
def _rmsprop_kernel(n, diff, history, local_rate, rms_decay, delta):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        g = diff[i]
        h = history[i] * rms_decay + (_ONE - rms_decay) * (g * g)
        history[i] = h
        diff[i] = local_rate * (g / (math.sqrt(h) + delta))


@cuda.jit(cache=True)
def _adadelta_kernel(n, diff, grad_history, update_history, local_rate, momentum, delta):
    one_minus = _ONE - momentum
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        g = diff[i]
        hg = grad_history[i] * momentum + one_minus * (g * g)
        grad_history[i] = hg
        u = g * math.sqrt((update_history[i] + delta) / (hg + delta))
        update_history[i] = update_history[i] * momentum + one_minus * (u * u)
        diff[i] = u * local_rate


@cuda.jit(cache=True)
def _adam_kernel(n, diff, m, v, beta1, beta2, eps_hat, scale):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        g = diff[i]
        mi = m[i] * beta1 + (_ONE - beta1) * g
        vi = v[i] * beta2 + (_ONE - beta2) * (g * g)
        m[i] = mi
        v[i] = vi
        diff[i] = scale * (mi / (math.sqrt(vi) + eps_hat))


@cuda.jit(cache=True)
def _l1_kernel(n, decay, data, diff):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        value = data[i]
        if value > 0:
            diff[i] += decay
        elif value < 0:
            diff[i] -= decay


def sgd_update(diff, history, local_rate, momentum, nesterov=False):
    """SGD / Nesterov momentum step (see sgd.sgd_update)."""
    launch(_sgd_kernel, diff.size, diff, history, np.float32(local_rate), np.float32(momentum),
           bool(nesterov))


def adagrad_update(diff, history, local_rate, delta):
    """AdaGrad step (see adagrad.adagrad_update)."""
    launch(_adagrad_kernel, diff.size, diff, history, np.float32(local_rate), np.float32(delta))


def rmsprop_update(diff, history, local_rate, rms_decay, delta):
    """RMSProp step (see rmsprop.rmsprop_update)."""
    launch(_rmsprop_kernel, diff.size, diff, history, np.float32(local_rate),
           np.float32(rms_decay), np.float32(delta))


def adadelta_update(diff, grad_history, update_history, local_rate, momentum, delta):
    """AdaDelta step (see adadelta.adadelta_update)."""
    launch(_adadelta_kernel, diff.size, diff, grad_history, update_history,
           np.float32(local_rate), np.float32(momentum), np.float32(delta))


def adam_update(diff, m, v, local_rate, beta1, beta2, eps_hat, t):
    """Adam step at t (see adam.adam_update, whose bias correction this shares)."""
    from pycaffe_cli.solvers.adam import adam_correction
    scale = np.float32(local_rate) * adam_correction(float(beta1), float(beta2), t)
    launch(_adam_kernel, diff.size, diff, m, v, np.float32(beta1), np.float32(beta2),
           np.float32(eps_hat), np.float32(scale))


def l1_regularize(decay, data, diff):
    """diff += decay * sign(data) (Caffe's gpu sign + axpy, fused)."""
    launch(_l1_kernel, diff.size, np.float32(decay), data, diff)
