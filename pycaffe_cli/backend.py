"""The one piece of global state: compute mode, device, and the random number source.

Caffe keeps these in its ``Caffe`` singleton; so do we, in this module only. Every random
draw in pycaffe (fillers, dropout masks, data shuffling) goes through ``rng()`` so that a
solver's ``random_seed`` makes a run repeatable.
"""
import enum

import numpy as np

from pycaffe_cli.errors import CaffeError


class Mode(enum.Enum):
    CPU = 0
    GPU = 1


_state = {"mode": Mode.CPU, "device": 0, "rng": np.random.default_rng(), "logged": set(),
          "solver_count": 1, "solver_rank": 0, "multiprocess": False, "compiles": set()}


def mode():
    """The current compute mode."""
    return _state["mode"]


def device():
    """The current GPU device id (meaningful in GPU mode only)."""
    return _state["device"]


def set_mode_cpu():
    _state["mode"] = Mode.CPU


def cuda_available():
    """True when numba can see a CUDA device (or its simulator is enabled)."""
    try:
        from numba import cuda
        return bool(cuda.is_available())
    except Exception:  # numba's CUDA layer raises many kinds of errors on odd set-ups
        return False


def set_mode_gpu(device_id=0):
    """Switch to GPU mode on ``device_id``; a clear error when there is no such CUDA device."""
    if not cuda_available():
        raise CaffeError(f"GPU {device_id} requested but no CUDA device is available; "
                         "run without --gpu (CPU mode)")
    from numba import cuda
    count = len(cuda.gpus)
    if not 0 <= device_id < count:
        raise CaffeError(f"GPU {device_id} requested but this machine has {count} CUDA "
                         f"device{'s' if count != 1 else ''} (ids 0-{count - 1})")
    cuda.select_device(device_id)
    _check_cuda_compiles(device_id)
    from pycaffe_cli.cuda import math
    math.use_device(device_id)
    _state["mode"] = Mode.GPU
    _state["device"] = device_id


def _check_cuda_compiles(device_id):
    """Compile and run one small kernel, once per device, so that a numba-cuda that cannot
    compile in this environment (one built for another numpy, say) is one clear error here
    instead of a traceback at a net's first kernel."""
    if device_id in _state["compiles"]:
        return
    import numpy
    try:
        from pycaffe_cli.cuda import fill, memory
        probe = memory.empty(1)
        fill.fill(probe, 0)
        probe.copy_to_host()
    except Exception as error:  # compile and driver errors come in many types
        import numba
        raise CaffeError(
            f"GPU {device_id}: numba's CUDA target cannot compile and run a kernel here "
            f"({type(error).__name__}: {error}); numba {numba.__version__}, numpy "
            f"{numpy.__version__}: install versions that work together (pip install "
            "'pycaffe[gpu]' resolves them) or run without --gpu") from None
    _state["compiles"].add(device_id)


def set_device(device_id):
    """Choose the GPU for GPU mode (Caffe's SetDevice); switches at once when already in it."""
    device_id = int(device_id)
    if device_id < 0:
        raise CaffeError(f"device id must be non-negative, got {device_id}")
    if _state["mode"] is Mode.GPU:
        set_mode_gpu(device_id)
    _state["device"] = device_id


def solver_setting(name):
    """Caffe's multi-solver settings: solver_count, solver_rank or multiprocess."""
    return _state[name]


def set_solver_setting(name, value):
    if name not in ("solver_count", "solver_rank", "multiprocess"):
        raise KeyError(name)
    _state[name] = value


def device_name(device_id):
    """The CUDA device's name, as Caffe logs it ("GPU 0: NVIDIA H100 ...")."""
    from numba import cuda
    name = getattr(cuda.gpus[device_id], "name", "CUDA simulator")
    return name.decode() if isinstance(name, bytes) else str(name)


def synchronize():
    """Wait for queued GPU work (timers around GPU work need it); a no-op in CPU mode."""
    if _state["mode"] is Mode.GPU:
        from numba import cuda
        cuda.synchronize()


def log_once(key, message):
    """Log a warning the first time ``key`` is seen in this process (fallback notices)."""
    if key not in _state["logged"]:
        _state["logged"].add(key)
        from pycaffe_cli.log import LOG
        LOG.warning(message)


def set_random_seed(seed):
    """Seed every random source pycaffe uses (Caffe's ``Caffe::set_random_seed``)."""
    _state["rng"] = np.random.default_rng(seed)


def rng():
    """The shared numpy Generator."""
    return _state["rng"]
