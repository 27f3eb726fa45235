"""PTX signatures of the solvers' device update rules: see compile_ptx_checks.py."""
from numba import types

from pycaffe_cli.solvers import cuda_updates as k

i64, f32, boolean = types.int64, types.float32, types.b1
flat = types.Array(f32, 1, "A")

KERNELS = [
    (k._sgd_kernel, [(i64, flat, flat, f32, f32, boolean)]),
    (k._adagrad_kernel, [(i64, flat, flat, f32, f32)]),
    (k._rmsprop_kernel, [(i64, flat, flat, f32, f32, f32)]),
    (k._adadelta_kernel, [(i64, flat, flat, flat, f32, f32, f32)]),
    (k._adam_kernel, [(i64, flat, flat, flat, f32, f32, f32, f32)]),
    (k._l1_kernel, [(i64, f32, flat, flat)]),
]
