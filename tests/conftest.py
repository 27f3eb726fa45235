"""Test-session set-up.

* numba's CUDA simulator is chosen before numba is first imported (an explicit
  NUMBA_ENABLE_CUDASIM=0 in the environment runs the GPU tests on a real device instead), so
  every test parametrized over ``engine`` runs its GPU case here, without a GPU.
* GPU tests (the ``engine`` and ``gpu_mode`` fixtures' GPU cases, ``compare_layer_modes``,
  tests marked ``gpu``) skip, with the reason, where the simulator is off and numba sees no
  device.
* In the simulator every kernel launch's argument types are recorded, and the session fails
  if one is not among the signatures the PTX check compiles (tests/launch_signatures.py).
* pycaffe_cli is imported before any test module imports numpy, so its thread settings apply.
* GLOG_minloglevel is cleared: the tests read INFO lines.
"""
import os
import textwrap

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
# The tests read INFO log lines: a GLOG_minloglevel the user set for their own runs must not
# quieten them (tests of the variable set it themselves).
os.environ.pop("GLOG_minloglevel", None)

import pytest  # noqa: E402

import pycaffe_cli  # noqa: E402,F401
from pycaffe_cli import backend  # noqa: E402
from tests import launch_signatures, simulator_patches  # noqa: E402
from tests.gpu_helpers import skip_without_cuda  # noqa: E402

_RECORDING = pytest.StashKey[bool]()
_UNDECLARED = pytest.StashKey[list]()


def pytest_configure(config):
    from numba import config as numba_config
    if numba_config.ENABLE_CUDASIM:
        # The simulator runs one Python thread per CUDA thread: two blocks of one warp each
        # make every grid-stride loop walk many elements and keep the tests quick.
        from pycaffe_cli.cuda import launch
        launch.THREADS_PER_BLOCK = 32
        launch.MAX_BLOCKS = 2
        simulator_patches.apply()
        launch_signatures.start_recording()
        config.stash[_RECORDING] = True


def pytest_sessionfinish(session):
    if session.config.stash.get(_RECORDING, False):
        missing = launch_signatures.undeclared()
        session.config.stash[_UNDECLARED] = missing
        if missing:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, config):
    missing = config.stash.get(_UNDECLARED, [])
    if missing:
        terminalreporter.section("CUDA launches the PTX check does not compile", red=True)
        terminalreporter.line("add these signatures to tests/kernels/cuda/ptx_*.py (or pass "
                              "the declared types; see tests/launch_signatures.py):")
        for line in missing:
            terminalreporter.line(f"  {line}")


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu"):
        skip_without_cuda()


@pytest.fixture(autouse=True, scope="session")
def numba_pool_started():
    """numba's thread pool running, as every layer has it before it calls a kernel (it asks
    for the thread count): kernels that claim blocks by thread id (pycaffe_cli/blas.py's
    ``claim``) link numba's ``get_thread_id`` only once the pool has started."""
    import numba
    numba.get_num_threads()


@pytest.fixture(autouse=True)
def plans_reuse_buffers(monkeypatch):
    """Inference plans reuse blob buffers as on a machine whose memory is too small for
    buffers of their own, whatever this machine's memory: tests that count buffers see the
    same plan everywhere (tests of that choice set the limit they need)."""
    from pycaffe_cli.inference import memory
    monkeypatch.setattr(memory, "own_buffers_limit", lambda: 0)


@pytest.fixture(params=["cpu", "gpu"])
def engine(request):
    """Run the test in CPU mode and in GPU mode (the simulator, or a real device)."""
    if request.param == "gpu":
        skip_without_cuda()
        backend.set_mode_gpu(0)
    else:
        backend.set_mode_cpu()
    yield request.param
    backend.set_mode_cpu()


@pytest.fixture
def gpu_mode():
    """GPU mode for the test (simulator or real device), CPU mode again afterwards."""
    skip_without_cuda()
    backend.set_mode_gpu(0)
    yield
    backend.set_mode_cpu()


@pytest.fixture
def no_cuda(monkeypatch):
    """Behave as on a machine where numba.cuda finds no device (the simulator is on here)."""
    monkeypatch.setattr(backend, "cuda_available", lambda: False)


@pytest.fixture
def write(tmp_path):
    """Write dedented text (a prototxt, a list file...) to tmp_path/name; return the path as
    a string."""
    def write_file(name, text):
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return str(path)
    return write_file
