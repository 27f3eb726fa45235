"""Fixtures for the ``caffe`` interface tests: prototxt files in tmp_path, and the engine's
mode and seed left as each test found them."""
import textwrap

import pytest

from pycaffe_cli import backend


@pytest.fixture
def write_file(tmp_path):
    """write_file(name, text) -> path of a new file in tmp_path (text dedented)."""
    def write(name, text):
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return str(path)
    return write


@pytest.fixture(autouse=True)
def cpu_mode_and_fixed_seed():
    backend.set_mode_cpu()
    backend.set_random_seed(1701)
    yield
    backend.set_mode_cpu()
