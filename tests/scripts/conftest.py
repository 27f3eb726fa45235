"""Fixtures for the script tests: the scripts point pycaffe's log at the current stderr and
may switch to GPU mode; each test gets the log set-up and the CPU mode it started with back."""
import pytest

from pycaffe_cli import backend
from pycaffe_cli.log import LOG


@pytest.fixture(autouse=True)
def keep_log_and_mode():
    saved = LOG.handlers[:], LOG.propagate, LOG.level
    yield
    LOG.handlers[:], LOG.propagate = saved[0], saved[1]
    LOG.setLevel(saved[2])
    backend.set_mode_cpu()
