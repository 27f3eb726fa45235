"""``pycaffe train``: train or fine-tune a model (Caffe's ``train()`` in tools/caffe.cpp)."""
import contextlib

import numpy as np

from pycaffe_cli import backend
from pycaffe_cli.commands import split_list, subcommand
from pycaffe_cli.commands.common import parse_gpus, require
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG
from pycaffe_cli.signals import SignalHandler
from pycaffe_cli.solvers.run_lock import snapshot_prefix_lock


@subcommand("train", summary="train or finetune a model",
            flags=("solver", "weights", "snapshot", "gpu", "level", "stage", "sigint_effect",
                   "sighup_effect"))
def train(solver, weights, snapshot, gpu, level, stage, sigint_effect, sighup_effect):
    """Train or finetune a model from a solver prototxt.

    Resume with --snapshot S.solverstate, or finetune from --weights a.caffemodel[,b...]
    (not both). SIGINT stops (--sigint_effect) and SIGHUP snapshots (--sighup_effect) by
    default, between iterations. A run holds <snapshot_prefix>.lock: a second run on the
    same prefix is refused.
    """
    require(solver, "Need a solver definition to train.")
    if snapshot and weights:
        raise CaffeError("Give a snapshot to resume training or weights to finetune but not "
                         "both.")
    from pycaffe_cli.net_weights import copy_trained_layers_from
    from pycaffe_cli.solvers import create_solver, read_solver

    param = read_solver(solver)
    param.train_state.level = level
    param.train_state.stage.extend(split_list(stage))
    _set_mode(param, gpu)

    with contextlib.ExitStack() as stack:
        handler = stack.enter_context(SignalHandler(sigint_effect, sighup_effect))
        the_solver = create_solver(param, solver_path=solver, action_callback=handler.action)
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
        LOG.info("Starting Optimization")
        # A diverging run gets one WARNING from the solver, not numpy's RuntimeWarnings.
        stack.enter_context(np.errstate(divide="ignore", over="ignore", invalid="ignore"))
        the_solver.solve()
    LOG.info("Optimization Done.")
    return 0


def _set_mode(param, gpu_flag):
    """Caffe's device choice: --gpu, else the solver's solver_mode/device_id, else CPU.

    Unlike Caffe, a solver that says ``solver_mode: GPU`` on a machine without a usable GPU
    trains on the CPU with a warning (many of Caffe's example solvers say GPU). An explicit
    ``--gpu`` that cannot be honoured stays an error.
    """
    gpus = parse_gpus(gpu_flag)
    from_solver = False
    if not gpus and param.HasField("solver_mode") and param.solver_mode == param.GPU:
        gpus, from_solver = [param.device_id], True
        if not backend.cuda_available():
            LOG.warning("solver_mode is GPU but no CUDA device is available; running on CPU")
            gpus = []
    if not gpus:
        LOG.info("Use CPU.")
        backend.set_mode_cpu()
        return
    LOG.info("Using GPUs " + ", ".join(str(g) for g in gpus))
    try:
        backend.set_mode_gpu(gpus[0])
    except CaffeError as error:
        if not from_solver:
            raise
        LOG.warning(f"solver_mode is GPU but GPU mode is unavailable ({error}); running on "
                    "CPU")
        LOG.info("Use CPU.")
        backend.set_mode_cpu()
        return
    if len(gpus) > 1:
        raise CaffeError(f"--gpu {gpu_flag}: training on several GPUs at once is not supported "
                         "in pycaffe; give a single device id")
    LOG.info(f"GPU {gpus[0]}: {backend.device_name(gpus[0])}")
    param.device_id = gpus[0]
