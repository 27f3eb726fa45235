"""How far Winograd F(4x4, 3x3)'s float32 result may be from the exact convolution, against
how far im2col + GEMM's may be: the inference plan runs a layer as Winograd only where the
first bound is at most MAX_BOUND_RATIO times the second, for every input.

The transforms (kernels/cpu/winograd.py) as matrices: y = A^T [sum_c U_c * V_c] A with
U_c = G g_c G^T (the weights, in float64, rounded once) and V_c = B^T d_c B (a 6x6 input
patch d_c, in float32). Rounding errors (u = 2**-24, gamma(n) = n u / (1 - n u); Higham,
"Accuracy and Stability of Numerical Algorithms", ch. 3), first order, elementwise:

* V: each of B^T's rows sums at most 5 scaled values (one product rounding and four
  additions per term), once down the columns and once along the rows: gamma(10) |B^T||d||B|.
* U: rounded once from float64: u |U| (gamma(2) with the float64 work).
* M = sum_c U_c * V_c, a GEMM over the C input channels: gamma(C) sum_c |U_c||V_c|.
* y = A^T M A: each term of A^T's rows passes at most four additions (m1 +- m2 first), twice.
* the bias: one more addition.

so |y^ - y| <= gamma(C + 21) |A^T| (sum_c |U_c| * |B^T||d_c||B|) |A| (+ u |b|), where im2col +
GEMM gives gamma(9 C + 1) sum |w||x| (+ u |b|). For inputs bounded by X, |B^T||d||B| <= X beta
with beta = (|B^T| 1)(1^T |B|), so each output channel m's worst case is

    Winograd  X gamma(C + 21) max_tile (|A^T| (sum_c |U_mc| * beta) |A|)
    GEMM      X gamma(9 C + 1) sum |w_m|     (reached at x = X sign(w_m))

Their ratio depends on the weights alone: ``bound_ratio``. For He-scaled random filters it
is about 14 at C = 16, 8 at C = 64 and 5 at C >= 256 (fewer channels: fewer GEMM terms to
dilute the transforms' amplification); filters whose transform is large for their size (high
frequencies) go higher and run as GEMMs.
"""
import numpy as np

# Winograd's worst case may be this many times the GEMM's (see the module docstring).
MAX_BOUND_RATIO = 16
# Roundings each term of a Winograd output sees besides the C of the GEMM (see above).
EXTRA_ROUNDINGS = 21

# B^T and A^T of the points 0, 1, -1, 1/2, -2 and infinity, as kernels/cpu/winograd.py's
# _b0.._b5 and _output_rows compute them.
B_T = np.array([[1, -1.5, -2, 1.5, 1, 0],
                [0, -1, 0.5, 2.5, 1, 0],
                [0, 1, -2.5, 0.5, 1, 0],
                [0, -2, -1, 2, 1, 0],
                [0, 0.5, -1, -0.5, 1, 0],
                [0, 1, -1.5, -2, 1.5, 1]], np.float64)
A_T = np.array([[1, 1, 1, 1, 1, 0],
                [0, 1, -1, 0.5, -2, 0],
                [0, 1, 1, 0.25, 4, 0],
                [0, 1, -1, 0.125, -8, 1]], np.float64)
_BETA = np.outer(np.abs(B_T).sum(axis=1), np.abs(B_T).sum(axis=1))


def bound_ratio(u, weights):
    """max over output channels of Winograd's worst-case error bound over im2col + GEMM's,
    for the layer with 3x3 ``weights`` (M, C, 3, 3) and their transform ``u`` (36, M, C)."""
    channels = weights.shape[1]
    summed = np.abs(u.astype(np.float64)).sum(axis=2).reshape(6, 6, -1)    # (6, 6, M)
    worst = np.einsum("ai,ijm,bj->mab", np.abs(A_T), summed * _BETA[:, :, None],
                      np.abs(A_T)).reshape(len(weights), -1).max(axis=1)
    gemm = np.abs(weights.astype(np.float64)).reshape(len(weights), -1).sum(axis=1)
    winograd = worst * (channels + EXTRA_ROUNDINGS)
    gemm = gemm * (9 * channels + 1)
    ratios = np.divide(winograd, gemm, out=np.zeros_like(winograd), where=gemm > 0)
    return float(ratios.max(initial=0.0))


def fits(u, weights):
    """Whether the bound lets the layer run as Winograd."""
    return bound_ratio(u, weights) <= MAX_BOUND_RATIO
