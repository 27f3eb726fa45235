"""``pycaffe`` as a rank that ``pycaffe train --gpu 0,1`` started, on the CPU, with NCCL
replaced by FakeNccl: what tests/parallel/test_launch.py starts in place of ``python -m
pycaffe_cli`` to run the launcher's path end to end without a GPU. The ``--gpu N`` the
launcher passes is dropped (CPU mode); everything else is the real code.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from pycaffe_cli.cli import main  # noqa: E402
from pycaffe_cli.parallel import launch, nccl, training  # noqa: E402
from tests.parallel.fake_nccl import FakeNccl  # noqa: E402


def _fake_spawned(started, gpus):
    lib = FakeNccl(started.size, launch.read_unique_id(), started.rank)
    return nccl.NcclCommunicator(lib, started.rank, started.size)


if __name__ == "__main__":
    training._nccl_spawned = _fake_spawned
    argv = sys.argv[1:]
    where = argv.index("--gpu")
    del argv[where:where + 2]
    sys.exit(main(argv))
