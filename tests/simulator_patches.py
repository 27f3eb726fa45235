"""Mends to numba's CUDA simulator, applied by conftest when the simulator is on.

They change how fast and how safely the simulator runs a block's threads, never what a kernel
computes: every kernel still runs one Python thread per CUDA thread, with real barriers.
"""
import sys
import threading

import numpy as np


def apply():
    _make_simulated_shared_arrays_thread_safe()
    _run_blocks_on_pooled_threads()


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


def _run_blocks_on_pooled_threads():
    """numba's simulator starts a new Python thread for every CUDA thread of every block
    (starting one waits for it: three quarters of a kernel's time), then checks them in a
    loop that never pauses (while it holds the GIL the simulated threads cannot run: a kernel
    with barriers spent ~90% of its time there). Here a block's CUDA threads are taken from a
    pool of threads that outlive the block, and the block's manager sleeps on a condition
    that a thread signals when it reaches a barrier or ends. Otherwise it does what numba's
    does: release the block when every live thread waits at the barrier, and raise the first
    thread's error after telling the others to abort (and, here, letting them end)."""
    from numba.cuda.simulator import kernel

    pool = _ThreadPool(_pooled_thread_class(kernel))

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
        points = list(np.ndindex(*self._block_dim))
        threads = pool.take(len(points))
        try:
            for thread, block_point in zip(threads, points):
                thread.assign(self, self._f, args, grid_point, block_point)
            with self.changed:
                _wait_for_block(self, threads)
        finally:
            pool.give_back(threads)

    kernel.BlockThread.syncthreads = syncthreads
    kernel.BlockManager.run = run_block


def _wait_for_block(manager, threads):
    """Release barriers as numba's manager does until every thread has ended; then raise the
    first error, if any (the others were told to abort and have ended)."""
    failed = None
    while True:
        if failed is None:
            failed = next((t for t in threads if t.ended and t.exception), None)
            if failed is not None:
                for other in threads:   # let the others leave their barriers and end
                    other.abort = True
                    other.syncthreads_blocked = False
                    other.syncthreads_event.set()
        live = [t for t in threads if not t.ended]
        if not live:
            break
        if failed is None and all(t.syncthreads_blocked for t in live):
            for t in live:
                t.syncthreads_blocked = False
                t.syncthreads_event.set()
        else:
            manager.changed.wait()
    if failed is not None:
        raise failed.exception[0].with_traceback(failed.exception[1])


class _ThreadPool:
    """Idle pooled threads, handed out a block at a time (kernels may launch from several
    host threads, so under a lock)."""

    def __init__(self, thread_class):
        self._thread_class = thread_class
        self._idle = []
        self._lock = threading.Lock()

    def take(self, count):
        with self._lock:
            taken, self._idle = self._idle[:count], self._idle[count:]
        while len(taken) < count:
            thread = self._thread_class()
            thread.start()
            taken.append(thread)
        return taken

    def give_back(self, threads):
        with self._lock:
            self._idle.extend(t for t in threads if t.ended)


def _pooled_thread_class(kernel):
    from numba.cuda.simulator.kernelapi import Dim3

    class PooledThread(kernel.BlockThread):
        """A simulated CUDA thread that runs one block's slot after another: the attributes
        numba's kernel API reads from the current thread (threadIdx, blockIdx, thread_id, the
        barrier) are set anew for each slot."""

        def __init__(self):
            threading.Thread.__init__(self, daemon=True)
            self._go = threading.Event()
            self.syncthreads_event = threading.Event()
            self.ended = True
            self.debug = False

        def assign(self, manager, function, args, block, point):
            self._manager = manager
            self._work = (function, args)
            self.blockIdx, self.threadIdx = Dim3(*block), Dim3(*point)
            dims = Dim3(*manager._block_dim)
            self.thread_id = self.threadIdx.x + dims.x * (self.threadIdx.y
                                                          + dims.y * self.threadIdx.z)
            self.exception, self.abort, self.syncthreads_blocked = None, False, False
            self.syncthreads_event.clear()
            self.ended = False
            self._go.set()

        def run(self):
            while True:
                self._go.wait()
                self._go.clear()
                function, args = self._work
                try:
                    function(*args)
                except Exception as error:   # as numba's BlockThread reports it
                    where = f"tid={list(self.threadIdx)} ctaid={list(self.blockIdx)}"
                    message = f"{where}: {error}" if str(error) else where
                    self.exception = (type(error)(message), sys.exc_info()[2])
                finally:
                    with self._manager.changed:
                        self.ended = True
                        self._manager.changed.notify()

    return PooledThread
