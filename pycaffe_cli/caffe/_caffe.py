"""The module-level functions and small classes of BVLC's ``_caffe`` extension, on the engine.

BVLC builds these in C++ (python/caffe/_caffe.cpp); here each is a thin call into
``pycaffe_cli``: the compute mode and device (``backend``), the layer registry, the solver
registry and the glog-style log.
"""
import time

from pycaffe_cli import backend
from pycaffe_cli.layers.base import registered_types
from pycaffe_cli.layers.python import Phase
from pycaffe_cli.log import LOG, glog_level, setup_logging

__version__ = "1.0.0"   # the Caffe release whose interface this is (CAFFE_VERSION)

TRAIN = Phase(0)   # BVLC's caffe.TRAIN / caffe.TEST: 0 and 1, printed as their names
TEST = Phase(1)


def set_mode_cpu():
    """Run nets and solvers on the CPU (the default)."""
    backend.set_mode_cpu()


def set_mode_gpu():
    """Run on the GPU chosen by ``set_device`` (0 unless set); an error without one."""
    backend.set_mode_gpu(backend.device())


def set_device(device_id):
    """Choose the GPU that GPU mode uses."""
    backend.set_device(device_id)


def set_random_seed(seed):
    """Seed every random source (fillers, dropout, shuffling), as Caffe::set_random_seed."""
    backend.set_random_seed(int(seed))


def solver_count():
    return backend.solver_setting("solver_count")


def set_solver_count(count):
    backend.set_solver_setting("solver_count", int(count))


def solver_rank():
    return backend.solver_setting("solver_rank")


def set_solver_rank(rank):
    backend.set_solver_setting("solver_rank", int(rank))


def set_multiprocess(multiprocess):
    backend.set_solver_setting("multiprocess", bool(multiprocess))


def has_nccl():
    """False: this build has no NCCL (multi-GPU reduction), like a Caffe built without it."""
    return False


def layer_type_list():
    """Every registered layer type string, sorted (Caffe's LayerRegistry::LayerTypeList)."""
    return registered_types()


def init_log(level=0):
    """Send log lines to stderr in glog format from ``level`` up (0 INFO ... 3 FATAL)."""
    setup_logging(level=glog_level(level))


def log(message):
    """Write ``message`` as an INFO line of Caffe's log."""
    LOG.info(message)


def get_solver(filename):
    """The solver a solver prototxt describes, of the class its ``type`` names."""
    from caffe.solver import solver_from_file
    return solver_from_file(filename)


class Layer:
    """Base class of Python layers (``type: "Python"``), as BVLC's ``caffe.Layer``.

    Subclasses define ``setup(bottom, top)`` (optional), ``reshape(bottom, top)``,
    ``forward(bottom, top)`` and ``backward(top, propagate_down, bottom)``. The net sets
    ``self.param_str``, ``self.phase`` (``caffe.TRAIN`` or ``caffe.TEST``) and ``self.blobs``
    (the learnable blobs, with ``add_blob(*shape)``) before calling ``setup``.
    ``self.param_str_`` is the same string under the name older Caffe forks used (Fast and
    Faster R-CNN's layers read it).
    """

    type = "Python"

    def __init__(self, layer_param):
        self.layer_param = layer_param

    @property
    def param_str_(self):
        """``param_str`` under its older name, readable and writable."""
        return self.param_str

    @param_str_.setter
    def param_str_(self, value):
        self.param_str = value

    def setup(self, bottom, top):
        """Read ``self.param_str`` and add learnable blobs; nothing by default."""


class Timer:
    """A wall-clock stopwatch (Caffe's Timer): ``start()``, ``stop()``, ``ms``."""

    def __init__(self):
        self._started = None
        self._elapsed = 0.0

    def start(self):
        backend.synchronize()
        self._started = time.perf_counter()

    def stop(self):
        if self._started is not None:
            backend.synchronize()
            self._elapsed = time.perf_counter() - self._started
            self._started = None

    @property
    def ms(self):
        """Milliseconds between the last start and stop (stops a running timer first)."""
        self.stop()
        return self._elapsed * 1000.0


class NCCL:
    """BVLC's NCCL handle as in a Caffe built without NCCL: constructing one does nothing and
    ``has_nccl()`` says False. Data-parallel training is ``pycaffe train``'s (under mpiexec,
    or with --gpu 0,1: pycaffe_cli/parallel)."""

    def __init__(self, solver, uid):
        self.solver = solver
        self.uid = uid
