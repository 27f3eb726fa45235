"""Fixtures for the command-line tests: run ``pycaffe`` in-process and capture its stderr."""
import contextlib
import io
import signal

import pytest

from pycaffe_cli import backend
from pycaffe_cli.cli import main
from pycaffe_cli.log import LOG


class Result:
    """What one ``pycaffe`` run left behind: exit status and everything written to stderr."""

    def __init__(self, code, err, out):
        self.code, self.err, self.out = code, err, out

    @property
    def messages(self):
        """The log lines with the glog prefix ("I1121 22:40:08.178536  5352 file.py:12] ")
        removed; other stderr lines unchanged."""
        return [line.split("] ", 1)[1] if "] " in line else line
                for line in self.err.splitlines()]

    def error_lines(self):
        return [line for line in self.err.splitlines() if line.startswith("pycaffe: error:")]

    def one_error(self, *words):
        """Exit 1 and a single error line holding ``words``, no traceback; the line."""
        assert self.code == 1, self.err
        assert "Traceback" not in self.err
        [line] = self.error_lines()
        for word in words:
            assert word in line, line
        return line


@pytest.fixture(autouse=True)
def interactive_sigint():
    """Ctrl-C raises KeyboardInterrupt during every CLI test, as in an interactive Python,
    however the suite was started: a shell starts background jobs (``make test &``) with
    SIGINT ignored, and Python then installs no handler. The old handler comes back after."""
    saved = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, saved if saved is not None else signal.SIG_DFL)


def run_in_process(*argv):
    """Call ``main(argv)`` in-process; return a Result. Leaves the backend in CPU mode and
    the "pycaffe" logger as it found it."""
    err, out = io.StringIO(), io.StringIO()
    saved = LOG.handlers[:], LOG.propagate, LOG.level
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = main([str(a) for a in argv])
    finally:
        # main() points the log at our stderr; give later tests (caplog) theirs back
        LOG.handlers[:], LOG.propagate = saved[0], saved[1]
        LOG.setLevel(saved[2])
        backend.set_mode_cpu()
    return Result(code, err.getvalue(), out.getvalue())


@pytest.fixture
def run_cli():
    """``run_in_process``."""
    return run_in_process
