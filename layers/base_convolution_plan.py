"""Which plan a (de)convolution layer runs: im2col + GEMMs (Caffe's) or direct window sums.

``BaseConvolutionLayer`` (base_convolution.py) picks one per layer at every reshape:
``force_plan`` where a test or a timing sets it, else ``choose_plan``. Both plans run on
either backend (base_convolution_backend.py); DIRECT needs 2-d windows.
"""
import enum

# The DIRECT plan's largest channels per group, in and out (see choose_plan).
DIRECT_MAX_IN = 32
DIRECT_MAX_OUT = 8


class Plan(enum.Enum):
    """How a (de)convolution layer runs its passes."""
    GEMM = "gemm"      # im2col + one GEMM per group (Caffe's)
    DIRECT = "direct"  # window sums on the blob layouts, no im2col (kernels/*/depthwise.py)


def choose_plan(use_2d, group, in_per_group, out_per_group):
    """DIRECT for 2-d windows whose groups make each GEMM tiny: more than one group, at most
    ``DIRECT_MAX_OUT`` output channels per group (the GEMM's rows) and ``DIRECT_MAX_IN`` input
    channels (depthwise layers, channel multipliers up to 8, small groups); GEMM otherwise.

    Measured on the CPU at batch 1 (the GEMM path's best case: its column buffer fits in
    cache), fwd + bwd: DIRECT wins every depthwise layer of MobileNet v2 by 2-9x and groups
    of (in x out) 2x2 .. 32x4 by 1.2-4x, ties 8x8, 32x8 and 1x16, and loses 8x16, 16x16,
    64x8 and 32x32 (by up to 2x). At batch 10 it wins all of those but 32x32."""
    if not use_2d or group == 1:
        return Plan.GEMM
    if in_per_group <= DIRECT_MAX_IN and out_per_group <= DIRECT_MAX_OUT:
        return Plan.DIRECT
    return Plan.GEMM
