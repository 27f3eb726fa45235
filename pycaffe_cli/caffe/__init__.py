"""BVLC Caffe's Python interface (``import caffe``) on the pycaffe engine.

The names are BVLC's (python/caffe/__init__.py): ``Net``, the solvers, ``Layer`` for Python
layers, the mode and seed functions, ``io``, ``NetSpec``/``layers``/``params``/``to_proto``,
``Classifier``, ``Detector`` and ``proto.caffe_pb2``. Everything runs on the same engine as
the ``pycaffe`` command line.
"""
from pycaffe_cli.log import LOG as _LOG
from pycaffe_cli.log import setup_logging as _setup_logging

from caffe._caffe import (NCCL, TEST, TRAIN, Layer, Phase, Timer, __version__, get_solver,
                          has_nccl, init_log, layer_type_list, log, set_device, set_mode_cpu,
                          set_mode_gpu, set_multiprocess, set_random_seed, set_solver_count,
                          set_solver_rank, solver_count, solver_rank)
from caffe.pycaffe import Blob, Net
from caffe.solver import (AdaDeltaSolver, AdaGradSolver, AdamSolver, NesterovSolver,
                          RMSPropSolver, SGDSolver, Solver)
from caffe import io, proto
from caffe.classifier import Classifier
from caffe.detector import Detector
from caffe.net_spec import NetSpec, layers, params, to_proto

if not _LOG.handlers:   # Caffe logs to stderr from the start; a host's own set-up wins
    _setup_logging()  # from GLOG_minloglevel, as glog starts

__all__ = ["AdaDeltaSolver", "AdaGradSolver", "AdamSolver", "Blob", "Classifier", "Detector",
           "Layer", "NCCL", "Net", "NesterovSolver", "NetSpec", "Phase", "RMSPropSolver",
           "SGDSolver", "Solver", "TEST", "TRAIN", "Timer", "__version__", "get_solver", "has_nccl",
           "init_log", "io", "layer_type_list", "layers", "log", "params", "proto", "set_device",
           "set_mode_cpu", "set_mode_gpu", "set_multiprocess", "set_random_seed",
           "set_solver_count", "set_solver_rank", "solver_count", "solver_rank", "to_proto"]
