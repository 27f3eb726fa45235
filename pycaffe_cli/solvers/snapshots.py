"""Snapshots and restore (Caffe's Solver::Snapshot / Restore and SGDSolver's state I/O).

``SnapshotMixin`` is one of the three parts of ``base.Solver``; it reads the attributes the
Solver declares (``param``, ``iter``, ``net``, ``test_nets``, ``current_step``, ``plateau``,
``history``, ``type``, ``run_id``) and writes ``iter``, ``current_step``, ``plateau``, the
history blobs and, when the snapshot has a pycaffe sidecar, ``run_id`` on restore. The file
formats, the write order and the checks live in state.py and sidecar.py.
"""
from pycaffe_cli.net import weights as net_weights
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG
from pycaffe_cli.solvers import lr_policy, sidecar, state as state_io


class SnapshotMixin:
    """snapshot_filename, snapshot and restore of a Solver."""

    def snapshot_filename(self, extension):
        return state_io.snapshot_filename(self.param.snapshot_prefix, self.iter, extension)

    def snapshot(self):
        """Write the weights, the exact-resume sidecar and the solver state, in that order.
        In data-parallel training every rank calls this and rank 0 writes (the coordinator,
        pycaffe_cli/parallel/coordinator.py, gathers the other ranks' states first)."""
        if self.coordinator is not None:
            return self.coordinator.snapshot(self)
        return state_io.write_snapshot(self.param, self.iter, self.net, self.test_nets,
                                       self.current_step, self.history, self.run_id,
                                       plateau=self.plateau)

    def restore(self, path):
        """Load a .solverstate(.h5): iter, weights (learned_net), current_step, history, and
        from its sidecar the run id, the random generator and the layers' states. The sidecar
        is checked completely (and the files against its SHA-256) before anything changes."""
        saved = state_io.read_solver_state(path)
        weights = state_io.find_learned_net(saved.learned_net, path)
        resume = sidecar.check_resume_files(path, saved.learned_net, weights, self.net,
                                            self.test_nets)
        self.iter = saved.iter
        if saved.learned_net:
            net_weights.copy_trained_layers_from(
                self.net, weights or state_io.locate_learned_net(saved.learned_net, path))
        self.current_step = saved.current_step
        self.plateau = lr_policy.PlateauState(saved.current_step, saved.minimum_loss,
                                              saved.iter_last_event)
        self._restore_history(saved, path)
        if resume is not None:
            self.run_id = resume.run_id
            sidecar.restore_resume_state(resume, self.net, self.test_nets)

    def _restore_history(self, saved, path):
        if len(saved.history) != len(self.history):
            raise CaffeError(f"{path}: Incorrect length of history blobs: the file has "
                             f"{len(saved.history)}, a {self.type} solver for this net keeps "
                             f"{len(self.history)}")
        if not saved.is_hdf5:
            LOG.info("SGDSolver: restoring history")
        for i, (blob, array) in enumerate(zip(self.history, saved.history)):
            if array.size != blob.count():
                raise CaffeError(f"{path}: history blob {i} has {array.size} values, the "
                                 f"param it belongs to has {blob.count()}")
            blob.reshape(array.shape)
            blob.data[...] = array
