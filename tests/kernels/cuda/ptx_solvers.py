"""PTX signatures of the solvers' device update rules: see compile_ptx_checks.py."""
from numba import types

from pycaffe_cli.solvers import adadelta, adam, adaptive, sgd, update

i64, f32, boolean = types.int64, types.float32, types.b1
flat = types.Array(f32, 1, "A")

KERNELS = [
    (sgd._sgd_kernel, [(i64, flat, flat, f32, f32, boolean)]),
    (adaptive._squared_gradient_kernel, [(i64, flat, flat, f32, f32, f32, boolean)]),
    (adadelta._adadelta_kernel, [(i64, flat, flat, flat, f32, f32, f32)]),
    (adam._adam_kernel, [(i64, flat, flat, flat, f32, f32, f32, f32)]),
    (update._l1_kernel, [(i64, f32, flat, flat)]),
]
