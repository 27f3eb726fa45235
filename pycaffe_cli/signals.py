"""SIGINT / SIGHUP during training, as Caffe's ``SignalHandler`` handles them.

The handlers only record that a signal arrived; the solver asks ``action()`` between
iterations and gets the effect the user chose on the command line (``--sigint_effect stop``,
``--sighup_effect snapshot`` by default). A pending SIGHUP is answered before a pending SIGINT,
and each answer clears its signal, so a second Ctrl-C while the first is still pending is
simply recorded again (Caffe's semantics). Leaving the ``with`` block puts back whatever
handlers were installed before.

As in Caffe, the handlers are installed even when the process started with a signal ignored
(a shell starts background jobs with SIGINT ignored, ``nohup`` ignores SIGHUP): ``kill -INT``
still stops a ``pycaffe train ... &`` between iterations, and a hangup still snapshots.
"""
import signal

from pycaffe_cli.errors import CaffeError

# The solver's action names (pycaffe_cli.solvers.base.ACTIONS), Caffe's SolverAction values.
NONE, STOP, SNAPSHOT = "none", "stop", "snapshot"
EFFECTS = (SNAPSHOT, STOP, NONE)

# SIGHUP does not exist on Windows; Caffe uses SIGBREAK there.
_HANGUP = getattr(signal, "SIGHUP", None) or getattr(signal, "SIGBREAK", None)


def requested_action(effect):
    """The solver action for a ``--sigint_effect`` / ``--sighup_effect`` value."""
    if effect not in EFFECTS:
        raise CaffeError(f'invalid signal effect "{effect}" was specified (choose from '
                         f'{", ".join(EFFECTS)})')
    return effect


class SignalHandler:
    """Records SIGINT and SIGHUP while active and maps them to solver actions.

    Use as a context manager around solving; pass ``handler.action`` as the solver's
    action callback.

    Args:
        sigint_effect, sighup_effect: "stop", "snapshot" or "none".
    """

    def __init__(self, sigint_effect="stop", sighup_effect="snapshot"):
        self.sigint_action = requested_action(sigint_effect)
        self.sighup_action = requested_action(sighup_effect)
        self._got_sigint = False
        self._got_sighup = False
        self._previous = {}

    def __enter__(self):
        if self._previous:
            raise RuntimeError("signal handlers hooked up twice")
        for signum in self._signals():
            self._previous[signum] = signal.signal(signum, self._record)
        return self

    def __exit__(self, *exc_info):
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}
        return False

    @staticmethod
    def _signals():
        return [s for s in (signal.SIGINT, _HANGUP) if s is not None]

    def _record(self, signum, frame):
        if signum == signal.SIGINT:
            self._got_sigint = True
        else:
            self._got_sighup = True

    def action(self):
        """The solver's action callback: "none", "snapshot" or "stop".

        Reports one pending signal per call and clears it.
        """
        if self._got_sighup:
            self._got_sighup = False
            return self.sighup_action
        if self._got_sigint:
            self._got_sigint = False
            return self.sigint_action
        return NONE
