"""glog-formatted logging, so scripts that parse Caffe's logs keep working.

A line looks like ``I1121 22:40:08.178536  5352 solver.py:227] Iteration 100, loss = 0.25``:
severity letter, month and day, wall time to the microsecond, thread id, source file and
line, then the message. Lines go to stderr, as Caffe's do.
"""
import logging
import os
import sys
import threading
import time

LOG = logging.getLogger("pycaffe")

_LEVEL_LETTERS = {logging.DEBUG: "I", logging.INFO: "I", logging.WARNING: "W",
                  logging.ERROR: "E", logging.CRITICAL: "F"}


class GlogFormatter(logging.Formatter):
    """Formats records the way glog prefixes its lines.

    A net of many layers logs hundreds of thousands of lines while it is set up, so the
    date part is formatted once per second, and the thread id is read here (the handler
    formats in the logging thread) rather than by a filter."""

    _second = None
    _stamp = ""

    def format(self, record):
        seconds = int(record.created)
        if seconds != self._second:
            self._stamp = time.strftime("%m%d %H:%M:%S", time.localtime(seconds))
            self._second = seconds
        micros = int((record.created - seconds) * 1e6)
        letter = _LEVEL_LETTERS.get(record.levelno, "I")
        return (f"{letter}{self._stamp}.{micros:06d} {threading.get_native_id():>6d} "
                f"{record.filename}:{record.lineno}] {record.getMessage()}")


class GlogHandler(logging.StreamHandler):
    """A stream handler that lets a closed pipe end the program.

    logging swallows write errors; when the reader of our stderr has gone
    (``pycaffe train ... 2>&1 | head``), carrying on would leave the pipeline waiting for a
    run nobody reads, so the BrokenPipeError goes up to the command line, which stops quietly.
    """

    def handleError(self, record):
        if isinstance(sys.exc_info()[1], BrokenPipeError):
            raise
        super().handleError(record)


# glog's minimum levels (0 INFO, 1 WARNING, 2 ERROR, 3 FATAL) as Python logging levels
GLOG_LEVELS = (logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)


def glog_level(number):
    """The logging level of glog's level ``number`` (clamped to 0..3)."""
    return GLOG_LEVELS[min(max(int(number), 0), len(GLOG_LEVELS) - 1)]


def environment_level():
    """The level ``GLOG_minloglevel`` asks for, as glog reads it at start-up (INFO when unset
    or not a number): Caffe users set it to quieten the log."""
    try:
        return glog_level(os.environ.get("GLOG_minloglevel", "0"))
    except ValueError:
        return logging.INFO


def setup_logging(stream=None, level=None):
    """Send pycaffe's log lines to ``stream`` (stderr by default) in glog format, from
    ``level`` up (by default what ``GLOG_minloglevel`` says)."""
    if level is None:
        level = environment_level()
    handler = GlogHandler(stream or sys.stderr)
    handler.setFormatter(GlogFormatter())
    LOG.handlers[:] = [handler]
    LOG.setLevel(level)
    LOG.propagate = False
    return handler


def run_script(prog, action, *args):
    """A script's main: glog-style logging on stderr, then ``action(*args)``. A CaffeError
    (a problem the user can fix) becomes one "prog: error: ..." line and exit status 1."""
    from pycaffe_cli.errors import CaffeError
    setup_logging()
    try:
        action(*args)
    except CaffeError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 1
    return 0
