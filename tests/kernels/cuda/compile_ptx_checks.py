"""Compile every CUDA kernel to PTX with the real numba.cuda compiler (NVVM), no GPU needed.

The simulator runs kernels as Python, so it cannot catch what only the CUDA compiler
rejects (unsupported constructs, typing; e.g. numba issue #10753, two-argument ``min``).
This script types each kernel for the argument types the host wrappers pass and compiles
it for compute capability 8.0, printing ``compiled <kernel>`` per kernel and ``float64 ops in
<kernel>`` where float32 maths was promoted (allowed only where listed in F64_ALLOWED). Exit
status 3 means no NVVM / libdevice is installed, so nothing was checked.
"""
import sys
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
dispatcher.get_current_device = lambda: pytypes.SimpleNamespace(compute_capability=CC)

from numba import cuda  # noqa: E402
from numba import types  # noqa: E402

from pycaffe_cli.layers.kernels.cuda import im2col, lrn, pooling  # noqa: E402

i64, f32, boolean = types.int64, types.float32, types.boolean
flat = types.Array(f32, 1, "C")
planes = types.Array(f32, 3, "C")
int_planes = types.Array(types.int32, 3, "C")
window = (i64,) * 6  # kernel, stride, pad (h, w)
conv = (i64,) * 12  # num .. dilation_w of im2col_batch
# a float32 mask compared with an integer index: exact in float64
F64_ALLOWED = {("_route_backward_kernel", 1)}

KERNELS = [
    (im2col._im2col_kernel, [(i64, flat) + conv + (flat, boolean)]),
    (im2col._col2im_kernel, [(i64, flat) + conv + (flat, boolean)]),
    (pooling._max_pool_forward_kernel, [(i64, planes, planes, int_planes) + window,
                                        (i64, planes, planes, planes) + window]),
    (pooling._route_backward_kernel, [(i64, planes, int_planes, planes) + window,
                                      (i64, planes, planes, planes) + window]),
    (pooling._ave_pool_forward_kernel, [(i64, planes, planes) + window]),
    (pooling._ave_pool_backward_kernel, [(i64, planes, planes) + window]),
    (pooling._sto_pool_train_kernel, [(i64, planes, planes, planes, int_planes)
                                      + (i64,) * 4]),
    (pooling._sto_pool_test_kernel, [(i64, planes, planes, planes) + (i64,) * 4]),
    (pooling._sto_pool_test_grad_kernel, [(i64,) + (planes,) * 5 + (i64,) * 4]),
    (lrn._lrn_across_forward_kernel, [(i64, planes, planes, planes, i64, f32, f32, f32)]),
    (lrn._lrn_across_backward_kernel, [(i64,) + (planes,) * 5 + (i64, f32, f32)]),
]


def main():
    failed = False
    for kernel, signatures in KERNELS:
        name = kernel.py_func.__name__
        for number, signature in enumerate(signatures):
            ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=CC)
            if ".f64" in ptx:
                print(f"float64 ops in {name} (signature {number})")
                failed |= (name, number) not in F64_ALLOWED
        print(f"compiled {name}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
