"""Fixtures for the io tests: capture pycaffe's log lines."""
import logging

import pytest

from pycaffe_cli.log import LOG


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)

    def messages(self, level=None):
        return [r.getMessage() for r in self.records if level is None or r.levelno == level]


@pytest.fixture
def log_lines():
    """Records of everything logged to pycaffe's LOG during the test."""
    handler = _Lines()
    old_level = LOG.level
    LOG.addHandler(handler)
    LOG.setLevel(logging.DEBUG)
    yield handler
    LOG.removeHandler(handler)
    LOG.setLevel(old_level)
