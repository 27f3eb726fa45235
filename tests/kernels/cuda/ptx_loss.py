"""PTX signatures of the softmax and loss kernels (kernels/cuda/loss.py and the loss layers'
own kernels): see compile_ptx_checks.py."""
from numba import types

from pycaffe_cli.layers import (accuracy, contrastive_loss, hinge_loss, infogain_loss,
                                multinomial_logistic_loss, sigmoid_cross_entropy_loss,
                                softmax_with_loss)
from pycaffe_cli.layers.kernels.cuda import loss

i64, f32, f64, boolean = types.int64, types.float32, types.float64, types.b1
flat = types.Array(f32, 1, "A")  # blob views
partials = types.Array(f64, 1, "C")  # slices of the partial-sums buffer
ignore = (i64, boolean)  # ignore_label, has_ignore

# float64 on purpose: the loss sums, and the per-pair / per-location sums the CPU paths add
# in float64
F64_ALLOWED = {("_label_counts_kernel", 0), ("_pair_terms_kernel", 0),
               ("_infogain_terms_kernel", 0), ("_row_sums_kernel", 0)}

KERNELS = [
    (loss._channel_max_sum_kernel, [(i64, flat, i64, i64, flat)]),
    (loss._softmax_divide_kernel, [(i64, flat, i64, i64, flat, i64, flat)]),
    (loss._channel_dot_kernel, [(i64, flat, flat, i64, i64, flat)]),
    (loss._softmax_backward_kernel, [(i64, flat, flat, i64, i64, flat, flat)]),
    (loss._label_counts_kernel, [(i64, i64, flat, i64) + ignore + (partials, partials)]),
    (softmax_with_loss._log_prob_kernel, [(i64, flat, flat, i64, i64) + ignore + (flat,)]),
    (softmax_with_loss._softmax_loss_backward_kernel,
     [(i64, flat, flat, i64, i64) + ignore + (f32, flat)]),
    (sigmoid_cross_entropy_loss._sigmoid_loss_kernel, [(i64, flat, flat) + ignore + (flat,)]),
    (sigmoid_cross_entropy_loss._sigmoid_loss_backward_kernel,
     [(i64, flat, flat) + ignore + (f32, flat)]),
    (contrastive_loss._pair_terms_kernel, [(i64, i64, flat, flat, flat, f32, boolean, flat,
                                            flat)]),
    (contrastive_loss._contrastive_backward_kernel, [(i64, i64) + (flat,) * 4 + (f32, boolean,
                                                                                  f32, flat)]),
    (accuracy._hits_kernel, [(i64, flat, flat, i64, i64, i64) + ignore + (flat,)]),
    (accuracy._per_class_kernel, [(i64, flat, flat, i64) + ignore + (flat,)]),
    (multinomial_logistic_loss._log_picked_kernel, [(i64, flat, flat, i64, flat)]),
    (multinomial_logistic_loss._picked_backward_kernel, [(i64, flat, flat, i64, f32, flat)]),
    (infogain_loss._infogain_terms_kernel, [(i64, flat, flat, flat, i64, i64) + ignore
                                            + (flat,)]),
    (infogain_loss._row_sums_kernel, [(i64, flat, flat)]),
    (infogain_loss._infogain_backward_kernel, [(i64,) + (flat,) * 4 + (i64, i64) + ignore
                                               + (f32, flat)]),
    (hinge_loss._margin_kernel, [(i64, flat, flat, i64, flat)]),
    (hinge_loss._hinge_backward_kernel, [(i64, flat, flat, i64, boolean, f32, flat)]),
]
