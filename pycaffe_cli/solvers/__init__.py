"""Solvers: Caffe's training loop and update rules.

``read_solver(path)`` reads a solver prototxt as Caffe's ReadSolverParamsFromTextFileOrDie
does (parse, upgrade the deprecated ``solver_type`` enum, complete the snapshot prefix);
``create_solver(param)`` builds the Solver subclass registered for ``param.type``
(Caffe's SolverRegistry::CreateSolver).
"""
from pycaffe_cli.solvers.base import (Solver, register_solver, registered_solver_types,
                                      solver_class)
from pycaffe_cli.solvers import adadelta, adam, adaptive, sgd  # noqa: F401 (register)
from pycaffe_cli.solvers.state import upgrade_snapshot_prefix

__all__ = ["Solver", "create_solver", "read_solver", "register_solver",
           "registered_solver_types", "solver_class"]


def read_solver(path):
    """Read, upgrade and complete a solver prototxt; returns a caffe.SolverParameter."""
    from pycaffe_cli.io.prototxt import read_solver_param
    from pycaffe_cli.io.upgrade import upgrade_solver
    param = upgrade_solver(read_solver_param(path), source=path)
    upgrade_snapshot_prefix(param, path)
    return param


def create_solver(param, solver_path=None, action_callback=None):
    """Build the solver ``param.type`` names (after upgrading a deprecated solver_type).

    Args:
        param: a caffe.SolverParameter.
        solver_path: the solver file, named in errors (the snapshot prefix is completed
            once, by ``read_solver``).
        action_callback: returns "none", "snapshot" or "stop" when polled (signals).
    """
    if param.HasField("solver_type"):
        from pycaffe_cli.io.upgrade import upgrade_solver
        param = upgrade_solver(_copy(param), source=solver_path or "<solver>")
    return solver_class(param.type)(param, solver_path=solver_path,
                                    action_callback=action_callback)


def _copy(param):
    copy = type(param)()
    copy.CopyFrom(param)
    return copy
