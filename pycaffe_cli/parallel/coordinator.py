"""What rank 0 decides for every rank: stops, snapshots, and the end of an interrupted test.

Rank 0 alone tests, logs, answers SIGINT / SIGHUP and writes snapshots (Caffe's
``Caffe::root_solver()``); the other ranks must still stop and snapshot at the same
iteration, or the next gradient sum would wait for a rank that has left. So the solver's
loop asks ``agree`` once per iteration, after the update: rank 0's request (from its signal
handler) is broadcast and every rank acts on it. A SIGHUP that arrives while rank 0 tests
is kept and answered at the end of that iteration; a SIGINT stops the test at once, as in
Caffe, and ``after_test`` tells the other ranks, which wait for rank 0 to finish testing.

A snapshot is written by rank 0 and holds every rank's random generator and data-layer
positions (gathered here), so resuming on as many ranks is exact.
"""
from pycaffe_cli.solvers import sidecar, state as state_io

NONE, SNAPSHOT, STOP = "none", "snapshot", "stop"


class Coordinator:
    """Set as ``solver.coordinator``; its ``action`` is the solver's action_callback.

    Args:
        comm: the Communicator.
        local_action: rank 0's signal handler's ``action`` (None: no signals here).
    """

    def __init__(self, comm, local_action=None):
        self.comm = comm
        self._local_action = local_action if comm.is_root else None
        self._pending_snapshot = False
        self._pending_stop = False

    def action(self):
        """The solver's action_callback: never talks to the other ranks (rank 0 polls it
        while testing, alone). A snapshot request waits for ``agree``; a stop is answered
        at once (it interrupts a test) and again by ``agree``."""
        if self._local_action is None:
            return NONE
        request = self._local_action()
        if request == SNAPSHOT:
            self._pending_snapshot = True
            return NONE
        if request == STOP:
            self._pending_stop = True
        return request

    def agree(self, request):
        """Every rank, once per iteration: rank 0's decision, one request at a time (a
        snapshot first, as Caffe's signal handler answers SIGHUP before SIGINT)."""
        decision = None
        if self.comm.is_root:
            decision = NONE
            if self._pending_snapshot:
                decision, self._pending_snapshot = SNAPSHOT, False
            elif self._pending_stop or request == STOP:
                decision, self._pending_stop = STOP, False
        return self.comm.bcast_object(decision)

    def after_test(self, solver):
        """Every rank, after rank 0's tests: stop where rank 0's test was interrupted."""
        stop = self.comm.bcast_object(solver.requested_early_exit if self.comm.is_root
                                      else None)
        solver.requested_early_exit = stop
        if stop:
            self._pending_stop = False

    def snapshot(self, solver):
        """Every rank: gather the ranks' states; rank 0 writes the snapshot."""
        states = self.comm.gather_object(sidecar.rank_state(solver.net))
        if not self.comm.is_root:
            return None
        return state_io.write_snapshot(solver.param, solver.iter, solver.net,
                                       solver.test_nets, solver.current_step, solver.history,
                                       solver.run_id, other_ranks=states[1:],
                                       plateau=solver.plateau)
