"""Register the solver tests' test-only layer types for the duration of this package only."""
import pytest

from pycaffe_cli.layers.base import registered_for_test
from tests.solvers.helpers import CounterLayer, DotLossLayer


@pytest.fixture(autouse=True, scope="package")
def solver_test_layers():
    with registered_for_test(DotLossLayer, CounterLayer):
        yield
