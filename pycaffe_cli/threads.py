"""One thread policy for the whole process: how many threads pycaffe computes with, and on
which pool.

Every parallel kernel and every matrix product runs on numba's threads (the products through
pycaffe_cli/blas.py, on a private single-threaded OpenBLAS): one pool, which runs one layer's
work at a time. numba's pool is Intel TBB's work-stealing scheduler where the ``tbb`` wheel
is installed (Linux and Windows on x86-64): its threads take work from each other, so one
that another process holds up does not hold up the rest, and they yield the core between
jobs instead of spinning. Elsewhere numba uses OpenMP, told to sleep at once between jobs
(OMP_WAIT_POLICY=PASSIVE, set in pycaffe_cli/__init__.py before numba loads).

How many threads: ``--threads N`` (a pycaffe addition), else NUMBA_NUM_THREADS,
OMP_NUM_THREADS or OPENBLAS_NUM_THREADS where the user set one (the first of them), else
the cores this process may use: its CPU affinity, capped by a container's CPU quota (cgroup
v2 ``cpu.max``, or v1 ``cpu.cfs_quota_us``), rounded up. numpy's own OpenBLAS is left as
the user set it: pycaffe's layers do not call it.
"""
import math
import os

# The variables a user sets to limit threads, in the order they are honoured.
THREAD_VARIABLES = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_CGROUP_V2 = "/sys/fs/cgroup/cpu.max"
_CGROUP_V1 = ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us")


def _read(path):
    try:
        with open(path, encoding="ascii") as stream:
            return stream.read().split()
    except (OSError, UnicodeDecodeError):
        return []


def _quota_cores():
    """The cores a cgroup CPU quota allows (rounded up), or None where there is none."""
    fields = _read(_CGROUP_V2)
    if len(fields) == 2 and fields[0] != "max":
        quota, period = fields
    else:
        quota, period = (_read(path)[:1] or ["-1"] for path in _CGROUP_V1)
        quota, period = quota[0], period[0]
    try:
        quota, period = int(quota), int(period)
    except ValueError:
        return None
    return max(1, math.ceil(quota / period)) if quota > 0 and period > 0 else None


def usable_cores():
    """The cores this process may run on: its affinity, capped by a cgroup quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _quota_cores()
    return max(1, min(cores, quota) if quota else cores)


def _from_environment():
    for name in THREAD_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


def default_threads():
    """The thread count when ``--threads`` is not given (see the module docstring)."""
    return _from_environment() or usable_cores()


def prepare_environment():
    """Before numba is imported: size numba's pool, and make TBB's library loadable where
    the tbb wheel put it (outside the loader's search path). A user's settings win."""
    os.environ.setdefault("NUMBA_NUM_THREADS", str(default_threads()))
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    _preload_tbb()


_TBB = []   # the libtbb loaded by _preload_tbb, if any


def _preload_tbb():
    """Load the tbb wheel's libtbb so that numba's TBB layer, which asks the loader for it
    by name, finds it already loaded."""
    import ctypes
    import sys
    for name in ("libtbb.so.12", "libtbb.12.dylib"):
        path = os.path.join(sys.prefix, "lib", name)
        if os.path.isfile(path) and not _TBB:
            try:
                _TBB.append(ctypes.CDLL(path, mode=getattr(ctypes, "RTLD_GLOBAL", 0)))
            except OSError:
                return


def set_threads(count):
    """Compute with ``count`` threads from now on (at most numba's pool size) in the calling
    thread, the one that runs the layers (numba keeps the setting per thread)."""
    import numba
    numba.set_num_threads(max(1, min(int(count), numba.config.NUMBA_NUM_THREADS)))


_SIDE_POOL = []


def map_in_order(function, items):
    """``[function(item) for item in items]`` on the side threads: decoding and resizing
    images for the data layers and convert_imageset, work that releases the GIL (Pillow's
    decoders, nogil kernels) and runs beside the compute pool, often on its prefetch thread.
    One pool of ``default_threads()`` threads serves the whole process; it is shut down at
    exit. Exceptions come back as raised, the first one first."""
    if len(items) < 2 or default_threads() < 2:
        return [function(item) for item in items]
    if not _SIDE_POOL:
        import atexit
        from concurrent.futures import ThreadPoolExecutor
        _SIDE_POOL.append(ThreadPoolExecutor(default_threads(),
                                             thread_name_prefix="pycaffe-decode"))
        atexit.register(_SIDE_POOL[0].shutdown)
    return list(_SIDE_POOL[0].map(function, items))


def map_ahead(function, items, name):
    """``function(item)`` for each of ``items``, in order, as a generator: computed on
    ``default_threads()`` threads named ``name``, at most four a thread ahead of the one
    taken, so a consumer that writes each result as it comes (the database converters)
    holds only a few at a time."""
    import collections
    from concurrent.futures import ThreadPoolExecutor
    workers = default_threads()
    with ThreadPoolExecutor(workers, thread_name_prefix=name) as pool:
        pending = collections.deque()
        for item in items:
            pending.append(pool.submit(function, item))
            if len(pending) > 4 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def pool_name():
    """numba's thread pool: "tbb", "omp" or "workqueue" (the one numba will choose, where no
    parallel kernel has run yet)."""
    import numba
    try:
        return numba.threading_layer()
    except ValueError:
        layer = numba.config.THREADING_LAYER
        if layer in ("default", "safe", "threadsafe", "forksafe"):
            return "tbb" if _TBB else _openmp_or_workqueue()
        return layer


def _openmp_or_workqueue():
    try:
        import numba.np.ufunc.omppool  # noqa: F401
        return "omp"
    except ImportError:
        return "workqueue"


def describe():
    """One line for logs and benchmarks: the threads, the usable cores and numba's pool."""
    import numba
    return (f"{numba.get_num_threads()} threads on {usable_cores()} usable cores, "
            f"{pool_name()} pool")
