"""Checks on a SolverParameter's values, made before any net is built.

They mirror what Caffe CHECKs (Solver::Init and InitTestNets in solver.cpp, the lr policies in
SGDSolver::GetLearningRate, the constructor_sanity_check of AdaGrad and RMSProp in
sgd_solvers.hpp) and refuse the values Caffe accepts but cannot use: a division by zero, a
square root of a negative number, a decay that makes the history grow without bound, NaN.
Every refusal is a ``FieldError`` naming the field and its value; the Solver puts the solver
file and the field's line in front: ``solver.prototxt:7: momentum2: 2: ...``.
"""
import math

from pycaffe_cli.detection.average_precision import AP_VERSIONS
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.foreign import unimplemented_option

REGULARIZATION_TYPES = ("L1", "L2")
# float fields that must hold a finite number (clip_gradients may be +-inf: clip never / off)
FINITE_FIELDS = ("base_lr", "gamma", "power", "momentum", "weight_decay", "delta", "momentum2",
                 "rms_decay")
# interval fields: 0 turns them off, a negative value is never meant (Caffe would act on |n|)
INTERVAL_FIELDS = ("display", "snapshot", "test_interval")
_CLIP_RULE = ("clip_gradients must be the L2 norm to clip the gradients to (> 0), or negative "
              "(the default, -1) for no clipping")


class FieldError(CaffeError):
    """A refused SolverParameter value: ``field: value: reason``.

    Attributes:
        field: the field's name; index: the entry of a repeated field, else None.
    """

    def __init__(self, field, shown_value, reason, index=None, count=1):
        where = field if index is None or count < 2 else f"{field} (entry {index + 1})"
        super().__init__(f"{where}: {shown_value}: {reason}")
        self.field = field
        self.index = index


def _shown(value):
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def refuse(param, field, reason, index=None):
    """A FieldError for ``param.<field>`` (entry ``index`` of a repeated field)."""
    value = getattr(param, field)
    if index is not None:
        return FieldError(field, _shown(value[index]), reason, index, len(value))
    return FieldError(field, _shown(value), reason)


def check_decay(param, field, what):
    """``field`` (a momentum or decay rate) lies in [0, 1); ``what`` says what it is."""
    if not 0 <= getattr(param, field) < 1:
        raise refuse(param, field, f"{what} must lie in [0, 1)")


def check_delta(param, solver_type, formula):
    """delta > 0: ``formula`` (in words) divides by something delta keeps from 0."""
    if not param.delta > 0:
        raise refuse(param, "delta", f"{solver_type} divides by {formula}, so delta must be "
                                     "> 0 (Caffe's default is 1e-08)")


def check_common(param):
    """The fields every solver type reads (the update rules' own: Solver.check_solver_param).

    Raises:
        FieldError: the first refused value.
    """
    for field in FINITE_FIELDS:
        if not math.isfinite(getattr(param, field)):
            raise refuse(param, field, "must be a finite number")
    if math.isnan(param.clip_gradients):
        raise refuse(param, "clip_gradients", _CLIP_RULE)
    if param.clip_gradients == 0:
        raise refuse(param, "clip_gradients", f"{_CLIP_RULE} (0 would scale every gradient "
                                              "to 0)")
    if param.average_loss < 1:   # Caffe: CHECK_GE(average_loss, 1)
        raise refuse(param, "average_loss", "average_loss must be >= 1 (the number of "
                                            "iterations the displayed loss averages)")
    if param.iter_size < 1:
        raise refuse(param, "iter_size", "iter_size must be >= 1 (the forward/backward passes "
                                         "accumulated per update)")
    if param.max_iter < 0:
        raise refuse(param, "max_iter", "max_iter must be >= 0 (the number of updates)")
    for field in INTERVAL_FIELDS:
        if getattr(param, field) < 0:
            raise refuse(param, field, f"{field} must be >= 0 (0: never)")
    if param.regularization_type not in REGULARIZATION_TYPES:
        raise refuse(param, "regularization_type", 'Unknown regularization type (known types: '
                                                   '"L1", "L2")')
    check_test_nets(param)


EVAL_TYPES = ("classification", "detection")


def check_fork_options(param):
    """SSD's solver options: eval_type "classification" or "detection" and, for
    "detection", a known ap_version; and refuse an option of a fork that pycaffe parses but
    does not implement yet (io/foreign.py)."""
    if param.eval_type not in EVAL_TYPES:
        raise refuse(param, "eval_type", 'Unknown evaluation type (known: "classification", '
                                         '"detection")')
    if param.eval_type == "detection" and param.ap_version not in AP_VERSIONS:
        known = ", ".join(f'"{name}"' for name in AP_VERSIONS)
        raise refuse(param, "ap_version", f"Unknown ap_version (known: {known})")
    found = unimplemented_option(param)
    if found:
        field, shown, reason = found
        raise FieldError(field, shown, reason)


def check_test_nets(param):
    """One test_iter (>= 0) per test net, one test_state per test net or none, and a positive
    test_interval when there are test nets (Caffe's Solver::InitTestNets).

    ``test_net_param`` and ``test_net`` entries are one test net each; a generic ``net`` /
    ``net_param`` is tested once per test_iter entry left over (as many as Caffe makes).
    """
    generic = param.HasField("net_param") or param.HasField("net")
    named = len(param.test_net_param) + len(param.test_net)
    iters = len(param.test_iter)
    if (generic and iters < named) or (not generic and iters != named):
        extra = ", plus one per extra value for the generic net" if generic else ""
        raise FieldError("test_iter", _values(iters), "test_iter must be specified for each "
                         f"test network: one per test_net/test_net_param entry ({named}){extra}")
    for index, value in enumerate(param.test_iter):
        if value < 0:
            raise refuse(param, "test_iter", "test_iter must be >= 0 (the number of test "
                                             "batches)", index)
    if param.test_state and len(param.test_state) != iters:
        raise FieldError("test_state", _values(len(param.test_state)), "test_state must be "
                         f"unspecified or specified once per test net ({iters})")
    if iters and param.test_interval <= 0:   # Caffe: CHECK_GT(test_interval, 0)
        raise refuse(param, "test_interval", "test_interval must be > 0 when there are test "
                                             f"nets ({iters})")


def _values(count):
    return f"{count} entr{'y' if count == 1 else 'ies'}"
