"""PTX signatures of the shape and structure layers' kernels (copies, Eltwise, Tile, Reduction,
Bias/Scale, ArgMax): see compile_ptx_checks.py."""
from numba import types

from pycaffe_cli.cuda import copy
from pycaffe_cli.layers import argmax, bias, eltwise, reduction, tile

i64, f32, f64, boolean = types.int64, types.float32, types.float64, types.b1
flat = types.Array(f32, 1, "A")
order = types.Array(types.int32, 1, "C")
partials = types.Array(f64, 1, "C")


def strided(ndim):
    axes = types.UniTuple(i64, ndim)
    return (i64, axes, flat, i64, axes, flat, i64, axes)


KERNELS = [
    (copy._strided_copy_kernel, [strided(ndim) for ndim in (1, 2, 3, 4)]),
    (copy._gather_rows_kernel, [(i64, flat, i64, i64, flat, flat)]),
    (copy._sort_index_kernel, [(i64, flat, order)]),
    (copy._gather_add_rows_kernel, [(i64, flat, order, i64, i64, flat, boolean, flat)]),
    (eltwise._weighted_sum_kernel, [(i64, f32, flat, f32, flat, flat)]),
    (eltwise._max_first_kernel, [(i64, flat, flat, flat, flat)]),
    (eltwise._max_next_kernel, [(i64, flat, f32, flat, flat)]),
    (eltwise._max_backward_kernel, [(i64, flat, f32, flat, flat)]),
    (tile._tile_backward_kernel, [(i64, flat, i64, i64, flat)]),
    (reduction._row_reduce_kernel, [(i64, i64, i64, flat, f64, flat)]),
    (reduction._reduction_backward_kernel, [(i64, i64, i64, flat, flat, f32, flat)]),
    (bias._broadcast_kernel, [(i64, flat, flat, i64, i64, boolean, flat)]),
    (bias._inner_sums_kernel, [(i64, flat, flat, boolean, i64, partials)]),
    (bias._outer_sums_kernel, [(i64, partials, i64, boolean, flat)]),
    (argmax._top_k_kernel, [(i64, flat, i64, i64, i64, i64, flat)]),
]
# Sums that the CPU path adds in float64 are added in float64 here too, on purpose.
F64_ALLOWED = {("_row_reduce_kernel", 0), ("_inner_sums_kernel", 0),
               ("_outer_sums_kernel", 0)}
