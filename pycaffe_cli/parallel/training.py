"""``pycaffe train`` as one rank of a data-parallel run: connect, attach, fail together.

``connect`` makes the Communicator for how this process was started (see ``__init__``) and
sets Caffe's global solver_count / solver_rank (backend.py), which the data layers (the
records each rank reads), the solver (its random seed, test nets on rank 0 only) and
``caffe.solver_count()`` read. On ranks other than 0 the log shows warnings and errors only.
``attach`` gives a built solver what Caffe's NCCL object gives it: rank 0's weights, the
gradient sums, and the coordinator. ``ending_every_rank_on_error`` makes a failure on any
rank end the run everywhere (MPI_Abort, or the launcher), instead of leaving the others
waiting for a rank that has gone.
"""
import contextlib
import logging
import sys
import traceback

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG
from pycaffe_cli.parallel.communicator import SingleProcess
from pycaffe_cli.parallel.coordinator import Coordinator
from pycaffe_cli.parallel.gradients import GradientReducer, broadcast_weights


def connect(launch, gpus=()):
    """The Communicator for ``launch``; ``gpus`` are --gpu's ids (one per rank on a machine
    under MPI, this rank's only one when started by launch.py). Sets the GPU mode first."""
    if launch.kind == "single":
        return _ranked(SingleProcess())
    if launch.kind == "mpi":
        from pycaffe_cli.parallel.mpi import MpiCommunicator
        control = MpiCommunicator()
        if not gpus:
            return _ranked(control)
        with ending_every_rank_on_error(control):
            return _ranked(_nccl_under_mpi(control, gpus))
    return _ranked(_nccl_spawned(launch, gpus))


def _nccl_under_mpi(control, gpus):
    if control.local_size > len(gpus):
        raise CaffeError(f"{control.local_size} ranks run on this machine but --gpu names "
                         f"{len(gpus)} device(s): give one device per rank")
    device = gpus[control.local_rank]
    backend.set_mode_gpu(device)
    from pycaffe_cli.parallel import nccl
    problem = nccl.nccl_problem() if control.is_root else None
    problem = control.bcast_object(problem)
    if problem:
        raise CaffeError(f"--gpu under mpiexec sums gradients with NCCL: {problem}; install "
                         "pycaffe[gpu]")
    uid = control.bcast_object(nccl.new_unique_id() if control.is_root else None)
    lib = nccl.CupyNccl(control.size, uid, control.rank, device)
    return nccl.NcclCommunicator(lib, control.rank, control.size, control=control)


def _nccl_spawned(launch, gpus):
    from pycaffe_cli.parallel import launch as launcher, nccl
    uid = launcher.read_unique_id()
    backend.set_mode_gpu(gpus[0])
    lib = nccl.CupyNccl(launch.size, uid, launch.rank, gpus[0])
    return nccl.NcclCommunicator(lib, launch.rank, launch.size)


def _ranked(comm):
    backend.set_solver_setting("solver_count", comm.size)
    backend.set_solver_setting("solver_rank", comm.rank)
    backend.set_solver_setting("multiprocess", comm.size > 1)
    log_on_rank_0_only(comm.rank)
    return comm


def log_on_rank_0_only(rank):
    """Ranks other than 0 log warnings and errors only (Caffe's LOG_IF(INFO, root_solver))."""
    if rank > 0:
        LOG.setLevel(logging.WARNING)


def attach(solver, comm, signal_action=None):
    """Make ``solver`` one rank of ``comm``'s run (nothing for a single process).

    Args:
        solver: the built (and possibly restored or fine-tuned) Solver.
        comm: the Communicator.
        signal_action: rank 0's signal handler's ``action``.
    """
    if comm.size == 1:
        return
    coordinator = Coordinator(comm, signal_action)
    solver.coordinator = coordinator
    solver.action_callback = coordinator.action
    broadcast_weights(solver.net, comm)
    reducer = GradientReducer(solver.net, comm, solver.param.iter_size,
                              solver.param.layer_wise_reduce)
    solver.callbacks.append(reducer)
    pids = ", ".join(str(pid) for pid in comm.pids)
    LOG.info(f"Data-parallel training on {comm.size} ranks over {comm.kind} (pids {pids}; "
             f"rank 0 answers SIGINT and SIGHUP for all); summing {reducer.count} values in "
             f"{len(reducer.buckets)} bucket(s) per iteration")


@contextlib.contextmanager
def ending_every_rank_on_error(comm):
    """On any failure in the block: one line (a traceback for a bug), then end every rank.
    A single process just lets the exception go up."""
    try:
        yield
    except BaseException as error:
        if comm.size == 1 or isinstance(error, SystemExit) and not error.code:
            raise
        _report(error, comm.rank)
        comm.abort(_status(error))


def _report(error, rank):
    if isinstance(error, CaffeError):
        message = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
        print(f"pycaffe: error: rank {rank}: {message}", file=sys.stderr, flush=True)
    elif isinstance(error, KeyboardInterrupt):
        print(f"pycaffe: error: rank {rank}: interrupted", file=sys.stderr, flush=True)
    else:
        traceback.print_exc()
        print(f"pycaffe: error: rank {rank} failed (the traceback above)", file=sys.stderr,
              flush=True)


def _status(error):
    user = getattr(error, "user_exception", None)
    if isinstance(user, SystemExit) and isinstance(user.code, int) and 0 < user.code < 256:
        return user.code
    if isinstance(error, SystemExit) and isinstance(error.code, int):
        return error.code
    return 130 if isinstance(error, KeyboardInterrupt) else 1
