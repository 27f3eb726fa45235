"""``pycaffe train --gpu 0,1``: one ``pycaffe train`` process per device, watched until done.

Caffe trains on several GPUs from one process with a thread per device; Python's threads
would share one interpreter lock, so here each device gets a process of its own: this one
checks the device ids, makes NCCL's unique id, starts ``pycaffe train ... --gpu <device>``
per device with ``PYCAFFE_RANK`` / ``PYCAFFE_SIZE`` in its environment and the id in a pipe
(``PYCAFFE_NCCL_ID_FD``), and waits. The children run in a session of their own, so a Ctrl-C
in the terminal reaches this process only: SIGINT and SIGHUP are passed to rank 0, which
decides for every rank (coordinator.py); SIGTERM to all of them. When one child fails (an
error, a crash, a kill) the others are stopped (SIGTERM, then SIGKILL after ``GRACE_S``)
and the run ends with one line naming the rank and its device.
"""
import os
import signal
import subprocess
import sys
import time

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG
from pycaffe_cli.parallel import ENV_NCCL_ID_FD, ENV_RANK, ENV_SIZE

POLL_S = 0.1
GRACE_S = 10.0
PYCAFFE = (sys.executable, "-m", "pycaffe_cli")


def check_devices(gpus, device_count=None):
    """Refuse a device named twice or, given ``device_count``, one this machine does not
    have (before anything starts)."""
    seen = set()
    for device in gpus:
        if device in seen:
            raise CaffeError(f"--gpu: device {device} given twice")
        seen.add(device)
    for device in gpus:
        if device_count is not None and device >= device_count:
            plural = "s" if device_count != 1 else ""
            raise CaffeError(f"--gpu: device {device} does not exist (this machine has "
                             f"{device_count} CUDA device{plural})")


def child_args(flags, device):
    """The ``pycaffe train`` arguments of the process for ``device``: the same flags, one
    device. ``flags`` maps flag names to values (None: not given)."""
    args = ["train"]
    for name, value in flags.items():
        if value is not None and name != "gpu":
            args += [f"--{name}", str(value)]
    return args + ["--gpu", str(device)]


def start_ranks(gpus, flags, uid, program=PYCAFFE, stderr=None):
    """Start one ``program train ...`` per device, each handed ``uid`` through a pipe (their
    output goes to ``stderr``, default this process's)."""
    children = []
    try:
        for rank, device in enumerate(gpus):
            children.append(_start_rank(rank, device, len(gpus), flags, uid, program, stderr))
    except BaseException:
        _stop(children, 0.0)   # none may wait for a rank that never started
        raise
    return children


def _start_rank(rank, device, size, flags, uid, program, stderr):
    """Start rank ``rank`` of ``size`` on ``device``; hand it ``uid`` through a pipe."""
    read_fd, write_fd = os.pipe()
    env = dict(os.environ, **{ENV_RANK: str(rank), ENV_SIZE: str(size),
                              ENV_NCCL_ID_FD: str(read_fd)})
    try:
        child = subprocess.Popen([*program, *child_args(flags, device)], env=env,
                                 pass_fds=(read_fd,), start_new_session=True, stderr=stderr)
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    with os.fdopen(write_fd, "wb") as pipe:
        pipe.write(uid)
    LOG.info(f"Rank {rank}: GPU {device}, pid {child.pid}")
    return child


def read_unique_id(environ=None):
    """In a started process: NCCL's unique id from the launcher's pipe."""
    environ = os.environ if environ is None else environ
    fd = int(environ[ENV_NCCL_ID_FD])
    with os.fdopen(fd, "rb") as pipe:
        return pipe.read()


def supervise(children, labels, grace_s=GRACE_S):
    """Wait for every child; pass signals on; stop all when one fails.

    Returns:
        0 when every child ended with status 0.

    Raises:
        CaffeError: naming the first child (``labels[i]``, e.g. "rank 1 (GPU 1)") that
            failed, after the others were stopped.
    """
    forward = {signal.SIGINT: children[:1], signal.SIGHUP: children[:1],
               signal.SIGTERM: children}
    previous = {signum: signal.signal(signum, _forwarder(targets))
                for signum, targets in forward.items()}
    try:
        failed = _wait_for_failure(children)
        if failed is None:
            return 0
        _stop(children, grace_s)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    raise CaffeError(f"{labels[failed]} {_ending(children[failed].returncode)}; the other "
                     "ranks were stopped")


def _forwarder(targets):
    def forward(signum, frame):
        for child in targets:
            if child.poll() is None:
                os.kill(child.pid, signum)
    return forward


def _wait_for_failure(children):
    """The index of a child that ended badly (one killed by a signal first: the others may
    have failed because it went), or None when all end with 0."""
    while True:
        statuses = [child.poll() for child in children]
        failed = [i for i, status in enumerate(statuses) if status not in (None, 0)]
        if failed:
            return min(failed, key=lambda i: (statuses[i] > 0, i))
        if None not in statuses:
            return None
        time.sleep(POLL_S)


def _stop(children, grace_s):
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + grace_s
    for child in children:
        try:
            child.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _ending(status):
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = "an unknown signal"
        return f"was killed by signal {-status} ({name})"
    return f"ended with exit status {status}"


def run(gpus, flags):
    """Train on ``gpus`` (two or more), one process each; the exit status (0) or CaffeError."""
    from pycaffe_cli.parallel import nccl
    problem = nccl.nccl_problem()
    if problem:
        raise CaffeError(f"--gpu {','.join(map(str, gpus))}: training on several GPUs sums "
                         f"the gradients with NCCL, and {problem}; install pycaffe[gpu]")
    children = start_ranks(gpus, flags, nccl.new_unique_id())
    return supervise(children, [f"rank {rank} (GPU {device})"
                                for rank, device in enumerate(gpus)])
