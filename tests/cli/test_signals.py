"""signals.py: --sigint_effect / --sighup_effect to solver actions, Caffe's SignalHandler."""
import os
import signal

import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.signals import SignalHandler, requested_action


@pytest.mark.parametrize("effect, action", [("stop", "stop"),
                                            ("snapshot", "snapshot"),
                                            ("none", "none")])
def test_requested_action(effect, action):
    assert requested_action(effect) == action


def test_invalid_effect():
    with pytest.raises(CaffeError, match='invalid signal effect "halt"'):
        requested_action("halt")


def test_caffe_defaults():
    handler = SignalHandler()
    assert handler.sigint_action == "stop"
    assert handler.sighup_action == "snapshot"


def _send(signum):
    os.kill(os.getpid(), signum)


@pytest.mark.parametrize("sigint_effect, sighup_effect", [
    ("stop", "snapshot"), ("snapshot", "stop"), ("none", "none")])
def test_signals_map_to_the_chosen_actions(sigint_effect, sighup_effect):
    with SignalHandler(sigint_effect, sighup_effect) as handler:
        assert handler.action() == "none"
        _send(signal.SIGINT)
        assert handler.action() == requested_action(sigint_effect)
        assert handler.action() == "none"  # answered once, then cleared
        _send(signal.SIGHUP)
        assert handler.action() == requested_action(sighup_effect)
        assert handler.action() == "none"


def test_sighup_is_answered_before_sigint():
    with SignalHandler("stop", "snapshot") as handler:
        _send(signal.SIGINT)
        _send(signal.SIGHUP)
        assert handler.action() == "snapshot"
        assert handler.action() == "stop"
        assert handler.action() == "none"


def test_a_second_sigint_is_only_recorded():
    with SignalHandler("snapshot", "snapshot") as handler:
        _send(signal.SIGINT)
        _send(signal.SIGINT)  # does not raise KeyboardInterrupt or kill the process
        assert handler.action() == "snapshot"
        assert handler.action() == "none"


def test_previous_handlers_come_back():
    before_int = signal.getsignal(signal.SIGINT)
    before_hup = signal.getsignal(signal.SIGHUP)
    with SignalHandler() as handler:
        assert signal.getsignal(signal.SIGINT) == handler._record
    assert signal.getsignal(signal.SIGINT) is before_int
    assert signal.getsignal(signal.SIGHUP) is before_hup
    with pytest.raises(KeyboardInterrupt):
        _send(signal.SIGINT)
        signal.sigtimedwait([], 0)  # a bytecode boundary for the handler to run at


def test_hooking_up_twice_is_a_bug():
    handler = SignalHandler()
    with handler:
        with pytest.raises(RuntimeError):
            handler.__enter__()
