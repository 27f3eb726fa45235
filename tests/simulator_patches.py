"""Two mends to numba's CUDA simulator, applied by conftest when the simulator is on.

They change how fast and how safely the simulator runs a block's threads, never what a kernel
computes: every kernel still runs one Python thread per CUDA thread, with real barriers.
"""
import sys
import threading

import numpy as np


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
    barriers (the reductions) spent ~90% of its time in that loop. Here the block's manager
    sleeps on a condition that a thread signals when it reaches a barrier or ends, and
    otherwise does what numba's does: release the block when every live thread waits at the
    barrier, and raise the first thread's error after telling the others to abort."""
    from numba.cuda.simulator import kernel

    thread_run = kernel.BlockThread.run

    def run_and_signal(thread):
        try:
            thread_run(thread)   # keeps the kernel's error in thread.exception
        finally:
            with thread._manager.changed:
                thread.ended = True
                thread._manager.changed.notify()

    def syncthreads(thread):
        if thread.abort:
            raise RuntimeError("abort flag set on syncthreads call")
        with thread._manager.changed:
            thread.syncthreads_blocked = True
            thread._manager.changed.notify()
        thread.syncthreads_event.wait()
        thread.syncthreads_event.clear()
        if thread.abort:
            raise RuntimeError("abort flag set on syncthreads clear")

    def run_block(self, grid_point, *args):
        self.changed = threading.Condition()
        threads = []
        for block_point in np.ndindex(*self._block_dim):
            def target():
                self._f(*args)
            thread = kernel.BlockThread(target, self, grid_point, block_point, self._debug)
            thread.ended = False
            threads.append(thread)
        for thread in threads:
            thread.start()
        with self.changed:
            while True:
                _raise_first_error(threads, [t for t in threads if t.ended])
                live = [t for t in threads if not t.ended]
                if not live:
                    return
                if all(t.syncthreads_blocked for t in live):
                    for t in live:
                        t.syncthreads_blocked = False
                        t.syncthreads_event.set()
                else:
                    self.changed.wait()

    kernel.BlockThread.run = run_and_signal
    kernel.BlockThread.syncthreads = syncthreads
    kernel.BlockManager.run = run_block


def _raise_first_error(threads, candidates):
    for thread in candidates:
        if thread.exception:
            for other in threads:   # let the others leave their barriers and end
                other.abort = True
                other.syncthreads_blocked = False
                other.syncthreads_event.set()
            raise thread.exception[0].with_traceback(thread.exception[1])
