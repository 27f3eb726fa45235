"""PTX signatures of the neuron layers' kernels (ReLU ... Dropout): see compile_ptx_checks.py."""
from numba import types

from pycaffe_cli.layers import (absval, bnll, clip, dropout, elu, exp, log, power, prelu, relu,
                                sigmoid, swish, tanh, threshold)

i64, f32, u64 = types.int64, types.float32, types.uint64
flat = types.Array(f32, 1, "A")  # blob views
partials = types.Array(types.float64, 1, "C")  # memory.empty(count, np.float64)
unary = (i64, flat, flat)  # n, x, y
binary = (i64, flat, flat, flat)  # n, y (or x), dy, dx

KERNELS = [
    (relu._relu_forward_kernel, [unary + (f32,)]),
    (relu._relu_backward_kernel, [binary + (f32,)]),
    (sigmoid._sigmoid_forward_kernel, [unary]),
    (sigmoid._sigmoid_backward_kernel, [binary]),
    (tanh._tanh_forward_kernel, [unary]),
    (tanh._tanh_backward_kernel, [binary]),
    (absval._absval_forward_kernel, [unary]),
    (absval._absval_backward_kernel, [binary]),
    (threshold._threshold_forward_kernel, [unary + (f32,)]),
    (bnll._bnll_forward_kernel, [unary]),
    (bnll._bnll_backward_kernel, [binary + (f32,)]),
    (elu._elu_forward_kernel, [unary + (f32,)]),
    (elu._elu_backward_kernel, [(i64,) + (flat,) * 4 + (f32,)]),
    (exp._exp_forward_kernel, [unary + (f32, f32)]),
    (exp._exp_backward_kernel, [binary + (f32,)]),
    (log._log_forward_kernel, [unary + (f32, f32, f32)]),
    (log._log_backward_kernel, [binary + (f32, f32, f32)]),
    (clip._clip_forward_kernel, [unary + (f32, f32)]),
    (clip._clip_backward_kernel, [binary + (f32, f32)]),
    (power._power_forward_kernel, [unary + (f32, f32, f32)]),
    (power._power_backward_kernel, [(i64,) + (flat,) * 4 + (i64, f32, f32, f32, f32)]),
    (swish._swish_forward_kernel, [binary + (f32,)]),
    (swish._swish_backward_kernel, [(i64,) + (flat,) * 4 + (f32,)]),
    (prelu._prelu_forward_kernel, [binary + (i64, i64)]),
    (prelu._prelu_backward_kernel, [(i64,) + (flat,) * 4 + (i64, i64)]),
    (prelu._slope_partials_kernel, [(flat, flat, partials, i64, i64, i64)]),
    (prelu._slope_diff_kernel, [(i64, partials, i64, flat)]),
    (dropout._dropout_kernel, [unary + (u64, f32, f32)]),
]
# the slope gradient adds its float32 terms in float64 on purpose, as the CPU path does
F64_ALLOWED = {("_slope_partials_kernel", 0), ("_slope_diff_kernel", 0)}
