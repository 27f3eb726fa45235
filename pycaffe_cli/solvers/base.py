"""The Solver (Caffe's Solver + the shared half of SGDSolver), assembled from three parts.

* the loop: Solve / Step / Test and their log lines (loop.py, ``LoopMixin``);
* the update pipeline: lr, clip, normalize, regularize, the rule, net.update (update.py,
  ``UpdateMixin``);
* snapshots and restore (snapshots.py, ``SnapshotMixin``).

Every Caffe solver type derives from SGDSolver, whose ``ApplyUpdate`` is the same for all of
them; only ``ComputeUpdateValue`` differs. So each update-rule family (sgd.py, adaptive.py,
adadelta.py, adam.py) subclasses ``Solver``, overrides ``compute_update_value(param_id,
rate)`` and says how many history blobs it keeps per param. The registry (registry.py) is
re-exported here and from ``pycaffe_cli.solvers``.
"""
import numpy as np

from pycaffe_cli import backend
from pycaffe_cli.blob import Blob
from pycaffe_cli.errors import CaffeError, located
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.proto_echo import solver_text
from pycaffe_cli.solvers import lr_policy, param_checks, state as state_io
from pycaffe_cli.solvers.divergence import DivergenceWatch
from pycaffe_cli.solvers.loop import ACTIONS, LoopMixin
from pycaffe_cli.solvers.nets import build_test_nets, build_train_net, check_train_net_source
from pycaffe_cli.solvers.registry import register_solver, registered_solver_types, solver_class
from pycaffe_cli.solvers.sidecar import new_run_id
from pycaffe_cli.solvers.snapshots import SnapshotMixin
from pycaffe_cli.solvers.update import UpdateMixin

__all__ = ["ACTIONS", "Solver", "register_solver", "registered_solver_types", "solver_class"]


class Solver(LoopMixin, UpdateMixin, SnapshotMixin):
    """Trains a net with Caffe's loop; subclasses supply the update rule.

    Args:
        param: a (current-format) caffe.SolverParameter.
        solver_path: the solver file, named in errors. The snapshot prefix is used as
            given: ``read_solver`` has already completed it (Caffe's
            UpgradeSnapshotPrefixProperty runs once, when the file is read).
        action_callback: called where Caffe polls for signals; returns "none", "snapshot"
            or "stop" (each request once, as Caffe's signal handler does).

    Attributes (the state the three parts share):
        param: the solver's own copy of the SolverParameter.
        net, test_nets: the train Net and the list of test Nets.
        iter: number of updates done so far; current_step: the lr policy's step index;
            plateau: lr_policy "plateau"'s state (lr_policy.PlateauState), snapshotted.
        run_id: this run's identity, recorded in its snapshots' sidecars (new when a run
            starts from scratch, the snapshot's when it resumes from a pycaffe snapshot).
        history: the update rule's history Blobs (``history_per_param`` per learnable param,
            grouped as Caffe orders them in the solverstate).
        callbacks: objects with on_start() and on_gradients_ready() (Caffe's callbacks).
        coordinator: None, or in data-parallel training what makes the ranks agree on
            stops and snapshots (pycaffe_cli/parallel/coordinator.py).
        action_callback, requested_early_exit: signal polling and its outcome.
        smoothed_loss, mean_scores: the last smoothed train loss and test scores.
    """

    type = None
    history_per_param = 1

    def __init__(self, param, solver_path=None, action_callback=None):
        self.param = caffe_pb2.SolverParameter()
        self.param.CopyFrom(param)
        LOG.info("Initializing solver from parameters: \n" + solver_text(self.param))
        self.action_callback = action_callback
        self.callbacks = []
        self.coordinator = None
        self.requested_early_exit = False
        root = backend.solver_setting("solver_rank") == 0   # Caffe::root_solver()
        try:
            self._check_param()
        except CaffeError as error:
            if not solver_path:
                raise
            raise located(error, _where(solver_path, error)) from None
        if root:
            state_io.check_snapshot_write_permissions(self.param)
        if self.param.random_seed >= 0:   # each rank its own stream, as Caffe
            backend.set_random_seed(self.param.random_seed
                                    + backend.solver_setting("solver_rank"))
        self.net = build_train_net(self.param)
        self.test_nets = build_test_nets(self.param) if root else []   # rank 0 tests
        self.mean_scores = [[] for _ in self.test_nets]
        LOG.info("Solver scaffolding done.")
        self.iter = 0
        self.current_step = 0
        self.plateau = lr_policy.PlateauState()
        self.run_id = new_run_id()
        self.smoothed_loss = np.float32(0)
        self._losses = []
        self._divergence = DivergenceWatch()   # one WARNING at the first non-finite loss
        self.history = [Blob(blob.shape) for _ in range(self.history_per_param)
                        for blob in self.net.learnable_params]

    def _check_param(self):
        """Every value is checked before a net is built (param_checks.py)."""
        param = self.param
        check_train_net_source(param)
        param_checks.check_common(param)
        param_checks.check_fork_options(param)
        lr_policy.check_policy(param)
        self.check_solver_param(param)

    def check_solver_param(self, param):
        """Update-rule specific checks (Caffe's constructor_sanity_check); FieldError if bad."""


def _where(solver_path, error):
    """The solver file, with the line of the refused field when the error names one."""
    if not isinstance(error, param_checks.FieldError):
        return solver_path
    from pycaffe_cli.io.prototxt import locate_field
    return locate_field(solver_path, error.field, error.index or 0)
