"""PTX signatures of the vision kernels (im2col, pooling, LRN): see compile_ptx_checks.py."""
from numba import types

from pycaffe_cli.layers.kernels.cuda import im2col, lrn, pooling

i64, f32, boolean = types.int64, types.float32, types.boolean
flat_any = types.Array(f32, 1, "A")
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
    (lrn._square_kernel, [(i64, flat_any, flat_any)]),
    (lrn._within_output_kernel, [(i64,) + (flat_any,) * 2 + (f32, f32) + (flat_any,) * 2]),
    (lrn._within_pooled_grad_kernel, [(i64,) + (flat_any,) * 4 + (f32, f32, flat_any)]),
    (lrn._within_bottom_grad_kernel, [(i64,) + (flat_any,) * 5]),
]
