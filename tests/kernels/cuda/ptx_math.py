"""PTX signatures of the CUDA math and memory kernels: see compile_ptx_checks.py."""
from numba import types

from pycaffe_cli.cuda import fill, math

i64, i32, f32, f64, boolean = types.int64, types.int32, types.float32, types.float64, types.b1
flat = types.Array(f32, 1, "C")
flat_any = types.Array(f32, 1, "A")  # slices of a blob's buffer
partials = types.Array(f64, 1, "C")

KERNELS = [
    (fill._fill_kernel, [(i64, f32, flat), (i64, f32, flat_any)]),
    (math._gemm_kernel, [(i64, boolean, boolean, i64, i64, i64, f32, flat_any, flat_any, f32,
                          flat_any)]),
    (math._axpby_kernel, [(i64, f32, flat_any, f32, flat_any)]),
    (math._scal_kernel, [(i64, f32, flat_any)]),
    (math._add_scalar_kernel, [(i64, f32, flat_any)]),
    (math._binary_kernel, [(i64, i64, flat_any, flat_any, flat_any)]),
    (math._sign_kernel, [(i64, flat_any, flat_any)]),
    (math._first_level_kernel, [(i64, i64, i64, flat_any, flat_any, partials)]),
    (math._next_level_kernel, [(i64, i64, partials, partials)]),
    (math._finish_kernel, [(i64, i64, partials, f64, flat_any)]),
]
# reductions add in float64 on purpose
F64_ALLOWED = {("_first_level_kernel", 0), ("_next_level_kernel", 0), ("_finish_kernel", 0)}
