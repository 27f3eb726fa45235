"""PTX signatures of SSD's Normalize kernels (layers/kernels/cuda/normalize.py): see
compile_ptx_checks.py."""
from numba import types

from pycaffe_cli.layers.kernels.cuda import normalize

i64, f64, boolean = types.int64, types.float64, types.b1
flat = types.Array(types.float32, 1, "A")
partials = types.Array(f64, 1, "C")

KERNELS = [
    (normalize._position_sums_kernel, [(i64, i64, i64, flat, flat, f64, boolean, flat)]),
    (normalize._channel_partials_kernel, [(i64, i64, i64, flat, flat, flat, boolean, i64,
                                           partials)]),
    (normalize._sample_sums_kernel, [(i64, i64, partials, f64, boolean, flat)]),
    (normalize._scale_diff_kernel, [(i64, i64, i64, partials, flat)]),
    (normalize._forward_kernel, [(i64, i64, i64, flat, flat, boolean, flat, boolean, flat)]),
    (normalize._scale_channels_kernel, [(i64, i64, i64, flat, flat, flat)]),
    (normalize._backward_kernel, [(i64, i64, i64, flat, flat, flat, flat, boolean, flat,
                                   boolean, flat)]),
]
# The sums of squares and products add in float64, as the CPU kernels do, on purpose.
F64_ALLOWED = {("_position_sums_kernel", 0), ("_channel_partials_kernel", 0),
               ("_sample_sums_kernel", 0), ("_scale_diff_kernel", 0)}
