"""Data-parallel training: one ``pycaffe train`` process per rank (Caffe's multi-GPU mode).

How a run is started decides how its ranks talk:

* ``mpiexec -n N pycaffe train --solver S``: N ranks over MPI (mpi.py; the ``mpi`` extra),
  on the CPU; with ``--gpu`` each rank takes one of the listed devices (by its rank on its
  machine) and the gradients go through NCCL, MPI only handing out NCCL's id (nccl.py).
* ``pycaffe train --gpu 0,1`` (or ``--gpu all``): this process starts one ``pycaffe train``
  per device and watches them (launch.py); they talk over NCCL.
* otherwise a single process (communicator.SingleProcess).

``detect_launch`` reads the environment the launcher sets, before anything imports mpi4py
(importing it starts MPI), so that a missing extra is one clear line on every rank.
The rest: gradients.py (bucketed, overlapped gradient sums), coordinator.py (rank 0 decides
stops and snapshots for everyone), training.py (wiring it into ``pycaffe train``).
"""
import importlib.util
import os
from dataclasses import dataclass

from pycaffe_cli.errors import CaffeError

# Set by launch.py in the processes it starts: rank, number of ranks, and the pipe carrying
# NCCL's unique id.
ENV_RANK, ENV_SIZE, ENV_NCCL_ID_FD = "PYCAFFE_RANK", "PYCAFFE_SIZE", "PYCAFFE_NCCL_ID_FD"
# (rank, size) variables of the MPI launchers: MPICH / Intel MPI (Hydra, also Slurm's PMI),
# Open MPI, MVAPICH.
MPI_ENV = (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
           ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"))


@dataclass(frozen=True)
class Launch:
    """How this process was started: ``kind`` is "single", "mpi" or "spawned" (by launch.py),
    with its rank and the number of ranks."""
    kind: str = "single"
    rank: int = 0
    size: int = 1


def detect_launch(environ=None, mpi4py_installed=None):
    """This process's Launch, from the environment (nothing is imported).

    Raises:
        CaffeError: started by an MPI launcher as one of several processes, but mpi4py is
            not installed; or the launcher's variables are not numbers.
    """
    environ = os.environ if environ is None else environ
    if ENV_SIZE in environ:
        return Launch("spawned", _number(environ, ENV_RANK), _number(environ, ENV_SIZE))
    for rank_name, size_name in MPI_ENV:
        if size_name in environ:
            size = _number(environ, size_name)
            if size <= 1:
                return Launch()
            installed = (mpi4py_installed() if mpi4py_installed is not None
                         else importlib.util.find_spec("mpi4py") is not None)
            if not installed:
                raise CaffeError(f"started by mpiexec as one of {size} processes, but mpi4py "
                                 "is not installed: install pycaffe[mpi] (pip install "
                                 "'pycaffe[mpi]', which brings mpi4py and an MPICH), or run "
                                 "pycaffe train without mpiexec")
            return Launch("mpi", _number(environ, rank_name), size)
    return Launch()


def _number(environ, name):
    try:
        return int(environ[name])
    except (KeyError, ValueError):
        raise CaffeError(f"environment variable {name} should be a number, found "
                         f"{environ.get(name)!r}") from None
