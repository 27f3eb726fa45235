"""``pycaffe train``: train or fine-tune a model (Caffe's ``train()`` in tools/caffe.cpp)."""
import contextlib

import numpy as np

from pycaffe_cli import backend, parallel
from pycaffe_cli.commands import split_list, subcommand
from pycaffe_cli.commands.common import cuda_device_count, parse_gpus, require
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG
from pycaffe_cli.parallel import launch as launcher
from pycaffe_cli.signals import SignalHandler


@subcommand("train", summary="train or finetune a model",
            flags=("solver", "weights", "snapshot", "gpu", "level", "stage", "sigint_effect",
                   "sighup_effect"))
def train(solver, weights, snapshot, gpu, level, stage, sigint_effect, sighup_effect):
    """Train or finetune a model from a solver prototxt.

    Resume with --snapshot S.solverstate, or finetune from --weights a.caffemodel[,b...]
    (not both). SIGINT stops (--sigint_effect) and SIGHUP snapshots (--sighup_effect) by
    default, between iterations. A run holds <snapshot_prefix>.lock: a second run on the
    same prefix is refused. Under mpiexec, or with several --gpu ids, it trains
    data-parallel: one process per rank, rank 0 logging, testing and snapshotting.
    """
    require(solver, "Need a solver definition to train.")
    if snapshot and weights:
        raise CaffeError("Give a snapshot to resume training or weights to finetune but not "
                         "both.")
    from pycaffe_cli.net.weights import copy_trained_layers_from
    from pycaffe_cli.parallel import training
    from pycaffe_cli.solvers import create_solver, read_solver

    launch = parallel.detect_launch()
    training.log_on_rank_0_only(launch.rank)
    param = read_solver(solver)
    param.train_state.level = level
    param.train_state.stage.extend(split_list(stage))
    gpus = _set_mode(param, gpu, launch)
    if len(gpus) > 1 and launch.kind == "single":   # one process per device
        return launcher.run(gpus, dict(solver=solver, weights=weights, snapshot=snapshot,
                                       level=level, stage=stage, sigint_effect=sigint_effect,
                                       sighup_effect=sighup_effect))
    comm = training.connect(launch, gpus)

    with training.ending_every_rank_on_error(comm), contextlib.ExitStack() as stack:
        if not comm.is_root:   # rank 0 answers the signals for every rank
            sigint_effect = sighup_effect = "none"
        handler = stack.enter_context(SignalHandler(sigint_effect, sighup_effect))
        the_solver = create_solver(param, solver_path=solver, action_callback=handler.action)
        if comm.is_root:
            from pycaffe_cli.solvers.run_lock import snapshot_prefix_lock
            stack.enter_context(snapshot_prefix_lock(the_solver.param.snapshot_prefix))
        if snapshot:
            LOG.info(f"Resuming from {snapshot}")
            the_solver.restore(snapshot)
        elif weights:
            for path in split_list(weights):
                LOG.info(f"Finetuning from {path}")
                copy_trained_layers_from(the_solver.net, path)
                for test_net in the_solver.test_nets:
                    copy_trained_layers_from(test_net, path)
        training.attach(the_solver, comm, handler.action)
        LOG.info("Starting Optimization")
        # A diverging run gets one WARNING from the solver, not numpy's RuntimeWarnings.
        stack.enter_context(np.errstate(divide="ignore", over="ignore", invalid="ignore"))
        the_solver.solve()
    LOG.info("Optimization Done.")
    return 0


def _set_mode(param, gpu_flag, launch=parallel.Launch()):
    """Caffe's device choice: --gpu, else the solver's solver_mode/device_id, else CPU.

    Unlike Caffe, a solver that says ``solver_mode: GPU`` on a machine without a usable GPU
    trains on the CPU with a warning (many of Caffe's example solvers say GPU). An explicit
    ``--gpu`` that cannot be honoured stays an error. Returns the device ids; with several,
    or under a parallel launch, the ranks set their device (pycaffe_cli/parallel).
    """
    gpus = parse_gpus(gpu_flag)
    launcher.check_devices(gpus)
    from_solver = False
    if not gpus and param.HasField("solver_mode") and param.solver_mode == param.GPU:
        gpus, from_solver = [param.device_id], True
        if not backend.cuda_available():
            LOG.warning("solver_mode is GPU but no CUDA device is available; running on CPU")
            gpus = []
    if not gpus:
        LOG.info("Use CPU.")
        backend.set_mode_cpu()
        return []
    LOG.info("Using GPUs " + ", ".join(str(g) for g in gpus))
    if len(gpus) > 1 or launch.kind != "single":
        count = cuda_device_count()
        if not count:
            backend.set_mode_gpu(gpus[0])   # the "no CUDA device" error
        launcher.check_devices(gpus, count)
        return gpus
    try:
        backend.set_mode_gpu(gpus[0])
    except CaffeError as error:
        if not from_solver:
            raise
        LOG.warning(f"solver_mode is GPU but GPU mode is unavailable ({error}); running on "
                    "CPU")
        LOG.info("Use CPU.")
        backend.set_mode_cpu()
        return []
    LOG.info(f"GPU {gpus[0]}: {backend.device_name(gpus[0])}")
    param.device_id = gpus[0]
    return gpus
