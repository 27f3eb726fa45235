"""PTX signatures of the region-of-interest pooling and smooth L1 loss kernels
(kernels/cuda/roi.py, kernels/cuda/smooth_l1.py): see compile_ptx_checks.py."""
from numba import types

from pycaffe_cli.layers.kernels.cuda import roi, smooth_l1

i64, i32, f32, boolean = types.int64, types.int32, types.float32, types.b1
flat = types.Array(f32, 1, "A")  # blob views
maps = types.Array(f32, 4, "A")  # (N, C, H, W) and (R, C, PH, PW) views of blobs
indices = types.Array(i32, 4, "A")  # argmax / mapping_channel
rois = types.Array(f32, 2, "A")  # (R, 5)

F64_ALLOWED = set()

KERNELS = [
    (roi._roi_pool_forward_kernel, [(i64, maps, rois, maps, indices, f32)]),
    (roi._roi_pool_backward_kernel, [(i64, maps, indices, rois, f32, maps)]),
    (roi._psroi_pool_forward_kernel, [(i64, maps, rois, maps, indices, f32, i64)]),
    (roi._psroi_pool_backward_kernel, [(i64, maps, rois, maps, f32, i64)]),
    (smooth_l1._smooth_l1_forward_kernel, [(i64,) + (flat,) * 4 + (boolean, boolean, f32, flat,
                                                                   flat)]),
    (smooth_l1._smooth_l1_backward_kernel, [(i64, flat, flat, flat, boolean, f32, f32, flat)]),
    (smooth_l1._channel_sum_kernel, [(i64, flat, i64, i64, flat)]),
]
