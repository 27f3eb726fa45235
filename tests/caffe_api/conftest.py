"""Fixtures for the ``caffe`` interface tests: the engine's mode and seed as each test
assumes them (``write``, for prototxt files in tmp_path, is in tests/conftest.py)."""
import pytest

from pycaffe_cli import backend


@pytest.fixture(autouse=True)
def cpu_mode_and_fixed_seed():
    backend.set_mode_cpu()
    backend.set_random_seed(1701)
    yield
    backend.set_mode_cpu()
