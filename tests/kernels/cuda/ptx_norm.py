"""PTX signatures of the normalisation kernels (BatchNorm, MVN, LSTMUnit and the shared
per-channel statistics): see compile_ptx_checks.py."""
from numba import types

from pycaffe_cli.layers import batch_norm, lstm_unit, mvn
from pycaffe_cli.layers.kernels.cuda import channel_stats

i64, f32, boolean = types.int64, types.float32, types.b1
flat = types.Array(f32, 1, "A")  # blob views and slices of them

# the per-channel sums add in float64 on purpose (the CPU paths' accuracy)
F64_ALLOWED = {("_moments_kernel", 0), ("_dot_means_kernel", 0)}

KERNELS = [
    (channel_stats._moments_kernel, [(i64, i64, i64, flat, flat, flat)]),
    (channel_stats._dot_means_kernel, [(i64, i64, i64, flat, flat, boolean, flat, flat)]),
    (channel_stats._normalize_kernel, [(i64, i64, i64, flat, flat, flat, boolean, flat,
                                        flat)]),
    (channel_stats._normalize_backward_kernel, [(i64, i64, i64, i64) + (flat,) * 6]),
    (batch_norm._global_stats_kernel, [(i64, flat, flat, flat, f32, flat, flat)]),
    (batch_norm._running_sums_kernel, [(i64, flat, flat, f32, f32, f32) + (flat,) * 4]),
    (mvn._sigma_kernel, [(i64, flat, f32, flat)]),
    (lstm_unit._forward_kernel, [(i64, i64) + (flat,) * 5]),
    (lstm_unit._backward_kernel, [(i64, i64) + (flat,) * 6 + (boolean, boolean, flat, flat)]),
]
