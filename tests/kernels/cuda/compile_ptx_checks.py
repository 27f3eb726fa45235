"""Compile every CUDA kernel to PTX with the real numba.cuda compiler (NVVM), no GPU needed.

The simulator runs kernels as Python, so it cannot catch what only the CUDA compiler
rejects (unsupported constructs, typing; e.g. numba issue #10753, two-argument ``min``).
This script types each kernel for the argument types the host wrappers pass and compiles
it for compute capability 8.0, printing ``compiled <kernel>`` per kernel and ``float64 ops in
<kernel>`` where float32 maths was promoted (allowed only where listed in F64_ALLOWED). Exit
status 3 means no NVVM / libdevice is installed, so nothing was checked.

The signatures live beside this script in ``ptx_*.py`` modules (one per area), each with a
``KERNELS`` list of (kernel, [argument type tuples]) and an ``F64_ALLOWED`` set of
(kernel name, signature number). Every ``cuda.jit`` kernel defined anywhere in pycaffe must
appear in one of them: ``uncovered <module>.<kernel>`` is printed, and the check fails,
for any that does not. Every kernel must also be declared with ``cache=True`` (a net's kernels
then compile once per machine, not once per run): ``uncached <module>.<kernel>`` otherwise.
Where ``ptxas`` is on the PATH, every PTX module is also assembled to machine code for
``SASS_ARCH`` (what the driver does on a real device; catches invalid PTX and shared memory
over the limit); ``ptxas failed on <kernel> ...`` fails the check, and the kernels using the
most registers per thread are listed.
"""
import concurrent.futures
import importlib
import os
import pathlib
import pkgutil
import re
import shutil
import subprocess
import sys
import tempfile
import types as pytypes

from numba.cuda.cudadrv import nvvm
from numba.cuda.cudadrv.error import NvvmSupportError

try:
    nvvm.NVVM()
    nvvm.LibDevice()
except (NvvmSupportError, RuntimeError, OSError) as error:
    print(f"no NVVM / libdevice: {str(error).splitlines()[0]}")
    sys.exit(3)

# Device functions ask the current device for its compute capability when they compile;
# there is no device here, so answer for the capability compile_ptx targets.
import numba.cuda.dispatcher as dispatcher  # noqa: E402

CC = (8, 0)
SASS_ARCH = "sm_90"  # ptxas then checks the PTX assembles for Hopper (H100, H200)
dispatcher.get_current_device = lambda: pytypes.SimpleNamespace(compute_capability=CC)

from numba import cuda  # noqa: E402
from numba.cuda.dispatcher import CUDADispatcher  # noqa: E402
from numba.core.caching import NullCache  # noqa: E402


def signature_modules():
    here = pathlib.Path(__file__).parent
    sys.path.insert(0, str(here))
    return [importlib.import_module(path.stem) for path in sorted(here.glob("ptx_*.py"))]


def all_kernels():
    """{id: ("module.name", dispatcher)} of every cuda.jit kernel (not device function)."""
    import pycaffe_cli
    import pycaffe_cli.layers
    found = {}
    for package in (pycaffe_cli, pycaffe_cli.layers):
        prefix = package.__name__ + "."
        for info in pkgutil.walk_packages(package.__path__, prefix):
            if info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if (isinstance(value, CUDADispatcher) and value.__module__ == module.__name__
                        and not value.targetoptions.get("device")):
                    found[id(value)] = (f"{module.__name__}.{name}", value)
    return found


def assemble(modules):
    """Run ptxas for SASS_ARCH on each (label, ptx). Returns (failures' messages, {label:
    (registers per thread, bytes of spill stores)}), or None where no ptxas is installed."""
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        return None

    def run(label, ptx):
        with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as source:
            source.write(ptx)
        try:
            done = subprocess.run([ptxas, f"-arch={SASS_ARCH}", "-v", "-o", os.devnull,
                                   source.name], capture_output=True, text=True)
        finally:
            os.unlink(source.name)
        if done.returncode != 0:
            return f"{label}: {done.stderr.strip()}", None
        report = done.stdout + done.stderr
        used = re.search(r"Used (\d+) registers", report)
        spilled = sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", report))
        return None, (int(used[1]) if used else 0, spilled)

    with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
        results = list(pool.map(lambda m: run(*m), modules))
    errors = [error for error, _ in results if error]
    usage = {label: used for (label, _), (_, used) in zip(modules, results) if used}
    return errors, usage


def main():
    failed = False
    kernels, f64_allowed, modules = [], set(), []
    for module in signature_modules():
        kernels += module.KERNELS
        f64_allowed |= getattr(module, "F64_ALLOWED", set())
    for kernel, signatures in kernels:
        name = kernel.py_func.__name__
        for number, signature in enumerate(signatures):
            ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=CC)
            modules.append((f"{name} (signature {number})", ptx))
            if ".f64" in ptx:
                print(f"float64 ops in {name} (signature {number})")
                failed |= (name, number) not in f64_allowed
        print(f"compiled {name}")
    assembled = assemble(modules)
    if assembled is None:
        print("no ptxas: PTX not assembled")
    else:
        errors, usage = assembled
        for error in errors:
            print(f"ptxas failed on {error}")
        failed |= bool(errors)
        print(f"assembled {len(modules) - len(errors)} of {len(modules)} for {SASS_ARCH}")
        most = sorted(usage.items(), key=lambda item: -item[1][0])[:5]
        print("most registers per thread: " + ", ".join(f"{k} {n}" for k, (n, _) in most))
        print(f"register spill stores: {sum(spilled for _, spilled in usage.values())} bytes")
    covered = {id(kernel) for kernel, _ in kernels}
    for key, (where, kernel) in all_kernels().items():
        if key not in covered:
            print(f"uncovered {where}")
            failed = True
        if isinstance(kernel._cache, NullCache):
            print(f"uncached {where}")
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
