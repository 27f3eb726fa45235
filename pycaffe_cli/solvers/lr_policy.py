"""Learning-rate policies: one small pure function of (solver param, iteration) each.

Caffe computes the rate in ``SGDSolver::GetLearningRate`` as a chain of ifs over the policy
string; here each policy is a function in ``POLICIES``. The arithmetic follows Caffe's types:
sub-expressions of ``float`` fields are float32, ``pow``/``exp`` run in double, and the rate
itself is a float32 (Caffe's ``Dtype rate``). ``multistep`` is a pure function of the iteration
(the number of ``stepvalue`` entries already reached) instead of Caffe's incrementing counter;
the two agree because ``stepvalue`` must be strictly increasing (checked).

SSD's fork adds "plateau", the one policy with state: the rate drops by ``gamma`` each time
the smoothed loss has not reached a new minimum for a window of ``plateau_winsize[k]``
iterations. Its formula is ``plateau``; ``advance_plateau`` is the fork's bookkeeping, which
the solver runs once per iteration and whose state (``PlateauState``) it snapshots.
"""
import math
from typing import NamedTuple

import numpy as np

from pycaffe_cli.solvers.param_checks import refuse

_f32 = np.float32


def fixed(param, iteration):
    """lr = base_lr"""
    return float(_f32(param.base_lr))


def step(param, iteration):
    """lr = base_lr * gamma ^ floor(iter / stepsize)"""
    return param.base_lr * _pow(param.gamma, step_index(param, iteration))


def exp(param, iteration):
    """lr = base_lr * gamma ^ iter"""
    return param.base_lr * _pow(param.gamma, iteration)


def inv(param, iteration):
    """lr = base_lr * (1 + gamma * iter) ^ (-power)"""
    base = _f32(1) + _f32(param.gamma) * _f32(iteration)
    return param.base_lr * _pow(float(base), -param.power)


def multistep(param, iteration):
    """lr = base_lr * gamma ^ k, k = number of stepvalue entries <= iter"""
    return param.base_lr * _pow(param.gamma, step_index(param, iteration))


def poly(param, iteration):
    """lr = base_lr * (1 - iter / max_iter) ^ power"""
    base = _f32(1) - _f32(iteration) / _f32(param.max_iter)
    return param.base_lr * _pow(float(base), param.power)


def sigmoid(param, iteration):
    """lr = base_lr * 1 / (1 + exp(-gamma * (iter - stepsize)))"""
    exponent = -_f32(param.gamma) * (_f32(iteration) - _f32(param.stepsize))
    return param.base_lr * (1.0 / (1.0 + _exp(float(exponent))))


POLICIES = {"fixed": fixed, "step": step, "exp": exp, "inv": inv, "multistep": multistep,
            "poly": poly, "sigmoid": sigmoid}
STATEFUL_POLICIES = ("plateau",)
FLT_MAX = float(np.finfo(np.float32).max)


def plateau(param, current_step):
    """lr = base_lr * gamma ^ current_step, current_step counting the plateau windows passed
    without a new minimum loss (``advance_plateau``)."""
    return param.base_lr * _pow(param.gamma, current_step)


class PlateauState(NamedTuple):
    """"plateau"'s state: the step, the smallest smoothed loss seen (float32; FLT_MAX before
    the first, as the fork's PreSolve sets it), and the iteration of the last event (a new
    minimum or a step)."""
    current_step: int = 0
    minimum_loss: float = FLT_MAX
    iter_last_event: int = 0


def advance_plateau(param, iteration, smoothed_loss, state):
    """The fork's "plateau" bookkeeping in GetLearningRate, for one iteration.

    A smoothed loss below the minimum becomes the minimum (an event); then, while windows
    remain, ``iteration >= iter_last_event + plateau_winsize[current_step]`` takes a step
    (an event too).

    Returns:
        (the new PlateauState, whether it took a step).
    """
    step_now, minimum, last_event = state
    if _f32(smoothed_loss) < _f32(minimum):
        minimum, last_event = float(_f32(smoothed_loss)), iteration
    stepped = False
    if step_now < len(param.plateau_winsize):
        if iteration >= last_event + param.plateau_winsize[step_now]:
            step_now, last_event, stepped = step_now + 1, iteration, True
    return PlateauState(step_now, minimum, last_event), stepped


def step_index(param, iteration):
    """Caffe's ``current_step`` for "step" and "multistep" (0 for the other policies)."""
    if param.lr_policy == "step":
        return iteration // param.stepsize
    if param.lr_policy == "multistep":
        return int(np.searchsorted(np.asarray(param.stepvalue), iteration, side="right"))
    return 0


def check_policy(param):
    """Raise FieldError for an unknown policy or a parameter the policy cannot use: Caffe's
    CHECKs (stepsize > 0 for "step" and "sigmoid", gamma >= 0 for all but "fixed" and
    "poly"), max_iter > 0 for "poly" (it divides by it) and increasing stepvalues."""
    name = param.lr_policy
    if name not in POLICIES and name not in STATEFUL_POLICIES:
        known = sorted([*POLICIES, *STATEFUL_POLICIES])
        raise refuse(param, "lr_policy", f'Unknown learning rate policy: "{name}" (known '
                                         f'policies: {", ".join(known)})')
    if name in ("step", "sigmoid") and param.stepsize <= 0:
        raise refuse(param, "stepsize", f'lr_policy "{name}" needs stepsize > 0')
    if name in ("step", "exp", "inv", "multistep", "sigmoid") and param.gamma < 0:
        raise refuse(param, "gamma", f'lr_policy "{name}" needs gamma >= 0')
    if name == "poly" and param.max_iter <= 0:
        raise refuse(param, "max_iter", 'lr_policy "poly" needs max_iter > 0 (it divides by '
                                        'it)')
    if name == "multistep":
        values = param.stepvalue
        for index in range(1, len(values)):
            if values[index] <= values[index - 1]:
                raise refuse(param, "stepvalue", 'lr_policy "multistep" needs strictly '
                             "increasing stepvalue entries (the one before is "
                             f"{values[index - 1]})", index)


def learning_rate(param, iteration, current_step=0):
    """The learning rate at ``iteration`` for a caffe.SolverParameter, as a float32 value
    (``current_step``: "plateau"'s step, from ``advance_plateau``; the others ignore it).

    Raises:
        FieldError: unknown ``lr_policy`` (the message lists the known ones) or a parameter
            the policy cannot use.
    """
    check_policy(param)
    with np.errstate(over="ignore"):   # a rate past float32's range is inf, as in Caffe
        if param.lr_policy == "plateau":
            return float(_f32(plateau(param, current_step)))
        return float(_f32(POLICIES[param.lr_policy](param, iteration)))


def _pow(base, exponent):
    """C's pow, which Caffe calls: inf past double's range and nan for a negative base with
    a fractional exponent, where math.pow raises (e.g. "exp" with gamma > 1 after many
    iterations, "poly" past max_iter)."""
    try:
        return math.pow(base, exponent)
    except (OverflowError, ValueError):
        with np.errstate(all="ignore"):
            return float(np.power(np.float64(base), np.float64(exponent)))


def _exp(value):
    """C's exp: inf past double's range ("sigmoid" long before its stepsize)."""
    try:
        return math.exp(value)
    except OverflowError:
        return math.inf
