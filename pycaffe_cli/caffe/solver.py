"""BVLC's solver classes (``caffe.SGDSolver(path)`` ... ``caffe.get_solver(path)``) over the
engine's solvers: the same loop, update rules, snapshots and log lines as ``pycaffe train``."""
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.solvers import read_solver, solver_class

from caffe._errors import raising_user_errors
from caffe.pycaffe import Net


class Solver:
    """A solver read from a solver prototxt. Subclasses fix the update rule (BVLC's
    ``SGDSolver(path)`` is SGD whatever the file's ``type`` says); ``get_solver`` takes the
    file's."""

    solver_type = None

    def __init__(self, filename):
        with raising_user_errors():
            param = read_solver(str(filename))
            self._solver = solver_class(self.solver_type or param.type)(
                param, solver_path=str(filename))
        self._attach()

    def _attach(self):
        self._net = Net._from_engine(self._solver.net)
        self._test_nets = [Net._from_engine(net) for net in self._solver.test_nets]

    @property
    def net(self):
        """The train net (a caffe.Net sharing the solver's memory)."""
        return self._net

    @property
    def test_nets(self):
        return list(self._test_nets)

    @property
    def iter(self):
        return self._solver.iter

    @property
    def param(self):
        """A copy of the SolverParameter in use."""
        param = caffe_pb2.SolverParameter()
        param.CopyFrom(self._solver.param)
        return param

    def step(self, iters):
        """Run ``iters`` training iterations (tests, display and snapshots as configured)."""
        with raising_user_errors():
            self._solver.step(int(iters))

    def solve(self, snapshot=None):
        """Train to max_iter, first restoring ``snapshot`` (a .solverstate) when given."""
        with raising_user_errors():
            self._solver.solve(snapshot)

    def apply_update(self):
        """Turn the current gradients into a step and apply it (no iteration counted)."""
        self._solver.apply_update()

    def restore(self, filename):
        with raising_user_errors():
            self._solver.restore(str(filename))

    def snapshot(self):
        """Write ``<prefix>_iter_<N>.caffemodel`` and ``.solverstate`` now."""
        self._solver.snapshot()

    def share_weights(self, net):
        """Make ``net`` use this solver's train-net weights."""
        net.share_with(self._net)

    def add_callback(self, on_start, on_gradients_ready=None):
        """Call ``on_start()`` at each iteration's start and ``on_gradients_ready()`` before
        the update; an object with those two methods may be passed alone."""
        if on_gradients_ready is None:
            callback = on_start
        else:
            callback = _Callback(on_start, on_gradients_ready)
        for method in ("on_start", "on_gradients_ready"):
            if not callable(getattr(callback, method, None)):
                raise TypeError(f"add_callback needs two callables (on_start, "
                                f"on_gradients_ready) or an object with {method}()")
        self._solver.callbacks.append(callback)


class _Callback:
    def __init__(self, on_start, on_gradients_ready):
        self.on_start = on_start
        self.on_gradients_ready = on_gradients_ready


def _solver_class(name, type_name):
    doc = f"A {type_name} solver read from a solver prototxt: ``caffe.{name}(filename)``."
    return type(name, (Solver,), {"solver_type": type_name, "__doc__": doc})


SGDSolver = _solver_class("SGDSolver", "SGD")
NesterovSolver = _solver_class("NesterovSolver", "Nesterov")
AdaGradSolver = _solver_class("AdaGradSolver", "AdaGrad")
RMSPropSolver = _solver_class("RMSPropSolver", "RMSProp")
AdaDeltaSolver = _solver_class("AdaDeltaSolver", "AdaDelta")
AdamSolver = _solver_class("AdamSolver", "Adam")


def solver_from_file(filename):
    """The solver of the type the file names (BVLC's ``caffe.get_solver``)."""
    return Solver(filename)
