"""tests/simulator_patches.py: numba's simulator with pooled threads and a sleeping block
manager still runs a block as CUDA does (barriers, thread indices, errors)."""
import threading

import numpy as np
import pytest
from numba import config

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM,
                                reason="tests numba's CUDA simulator, which is off")


def run_block(function, threads, *args, block=(0, 0, 0)):
    from numba.cuda.simulator import kernel
    kernel.BlockManager(function, (1, 1, 1), (threads, 1, 1), False).run(block, *args)


def tree_sum(values, out):
    """Each thread adds pairs after a barrier, halving the live ones (a block reduction)."""
    me = threading.current_thread()
    i = me.threadIdx.x
    step = len(values) // 2
    while step > 0:
        me.syncthreads()
        if i < step:
            values[i] += values[i + step]
        step //= 2
    me.syncthreads()
    if i == 0:
        out[0] = values[0]


def test_barriers_order_a_block_reduction_launch_after_launch():
    for threads in (8, 32, 4, 32):   # pooled threads are reused, and more made when needed
        values = np.arange(threads, dtype=np.float64)
        out = np.zeros(1)
        run_block(tree_sum, threads, values, out)
        assert out[0] == threads * (threads - 1) / 2


def fail_in_thread_3(seen):
    me = threading.current_thread()
    me.syncthreads()
    seen.append((me.threadIdx.x, me.blockIdx.x, me.thread_id))
    if me.threadIdx.x == 3:
        raise IndexError("out of bounds")
    me.syncthreads()   # the others wait here until they are told to abort


def test_a_thread_error_names_the_thread_and_the_next_block_runs():
    seen = []
    with pytest.raises(IndexError, match=r"tid=\[3, 0, 0\] ctaid=\[2, 0, 0\]: out of bounds"):
        run_block(fail_in_thread_3, 8, seen, block=(2, 0, 0))
    assert (3, 2, 3) in seen   # threads still at the first barrier may have been aborted
    assert all(block == 2 and thread_id == i for i, block, thread_id in seen)
    values, out = np.ones(16), np.zeros(1)
    run_block(tree_sum, 16, values, out)
    assert out[0] == 16
