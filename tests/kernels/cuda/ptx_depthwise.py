"""PTX signatures of the direct (depthwise) convolution kernels: see compile_ptx_checks.py."""
from numba import types

from pycaffe_cli.layers.kernels.cuda import depthwise

i64, boolean = types.int64, types.boolean
flat = types.Array(types.float32, 1, "A")  # blob views and slices of them
geometry = (i64,) * 11  # channels, height, width .. dilation_w

KERNELS = [
    (depthwise._forward_kernel, [(i64, flat) + geometry + (flat, i64, i64, flat, boolean,
                                                           flat)]),
    (depthwise._backward_data_kernel, [(i64, flat) + geometry + (flat, i64, i64, flat)]),
    (depthwise._weight_grad_kernel, [(i64, flat, flat, i64) + geometry + (i64, i64, flat)]),
]
