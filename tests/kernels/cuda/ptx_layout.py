"""PTX signatures of the convolution layout kernels: see compile_ptx_checks.py."""
from numba import types

from pycaffe_cli.layers.kernels.cuda import layout

i64, f32, boolean = types.int64, types.float32, types.b1
flat = types.Array(f32, 1, "A")

KERNELS = [
    (layout._channels_to_images_kernel, [(i64, flat, i64, i64, i64, flat, boolean, flat)]),
    (layout._images_to_channels_kernel, [(i64, flat, i64, i64, i64, flat)]),
    (layout._add_channel_bias_kernel, [(i64, i64, i64, flat, flat)]),
]
