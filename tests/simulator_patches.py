"""Two mends to numba's CUDA simulator, applied by conftest when the simulator is on.

They change how fast and how safely the simulator runs a block's threads, never what a kernel
computes: every kernel still runs one Python thread per CUDA thread, with real barriers.
"""
import sys
import threading
import time

import numpy as np

# How long the block's manager sleeps between looks at its threads (seconds).
POLL_INTERVAL_S = 5e-5


def apply():
    _make_simulated_shared_arrays_thread_safe()
    _make_blocks_wait_without_spinning()


def _make_simulated_shared_arrays_thread_safe():
    """numba's simulator gives a block's threads one shared array per source line by looking
    the line up in a dict and creating the array when missing, without a lock: two threads
    reaching the line at once can each create their own (uninitialised) array, and the block's
    reduction then reads garbage (seen as a rare wrong BatchNorm mean). Same lookup, locked."""
    from numba.core import types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    lock = threading.Lock()
    dynamic = kernelapi.FakeCUDAShared.array

    def array(self, shape, dtype):
        if shape == 0:
            return dynamic(self, shape, dtype)
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            found = self._allocations.get(key)
            if found is None:
                found = self._allocations[key] = np.empty(shape, dtype)
        return found

    kernelapi.FakeCUDAShared.array = array


def _make_blocks_wait_without_spinning():
    """numba's simulator starts a block's threads, then checks them in a loop that never
    pauses: while it holds the GIL the simulated threads cannot run, and a kernel with
    barriers (the reductions) spent ~90% of its time in that loop. Same checks, same order of
    events (release the block when every live thread waits at the barrier, raise the first
    thread's error), with a short sleep between looks."""
    from numba.cuda.simulator import kernel

    def run(self, grid_point, *args):
        threads = []
        for block_point in np.ndindex(*self._block_dim):
            def target():
                self._f(*args)
            thread = kernel.BlockThread(target, self, grid_point, block_point, self._debug)
            thread.start()
            threads.append(thread)
        live = threads
        while live:
            _raise_first_error(threads, [t for t in live if not t.syncthreads_blocked])
            live = [t for t in live if t.is_alive()]
            if live and all(t.syncthreads_blocked for t in live):
                for t in live:
                    t.syncthreads_blocked = False
                    t.syncthreads_event.set()
            else:
                time.sleep(POLL_INTERVAL_S)
        _raise_first_error(threads, threads)

    kernel.BlockManager.run = run


def _raise_first_error(threads, candidates):
    for thread in candidates:
        if thread.exception:
            for other in threads:   # let the others leave their barriers and end
                other.abort = True
                other.syncthreads_blocked = False
                other.syncthreads_event.set()
            raise thread.exception[0].with_traceback(thread.exception[1])
