"""The solver registry (Caffe's SolverRegistry): ``type: "<name>"`` -> Solver subclass.

Importing ``pycaffe_cli.solvers`` (which Python does before any of its modules) imports every
update-rule module, so every built-in type is registered before the first look-up.
"""
from pycaffe_cli.errors import CaffeError

_SOLVERS = {}


def register_solver(type_name):
    """Class decorator: make a Solver subclass selectable by ``type: "<type_name>"``."""
    def decorate(cls):
        if type_name in _SOLVERS:
            raise RuntimeError(f"solver type {type_name!r} registered twice")
        _SOLVERS[type_name] = cls
        cls.type = type_name
        return cls
    return decorate


def registered_solver_types():
    """The registered type names, sorted."""
    return sorted(_SOLVERS)


def solver_class(type_name):
    """The Solver subclass registered for ``type_name``; CaffeError listing the known ones."""
    if type_name not in _SOLVERS:
        raise CaffeError(f'Unknown solver type: "{type_name}" (known types: '
                         f'{", ".join(registered_solver_types())})')
    return _SOLVERS[type_name]
