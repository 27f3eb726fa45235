"""Which plan a (de)convolution layer runs: im2col + GEMMs (Caffe's) or direct window sums;
and whether the inference plan runs a convolution as Winograd F(4x4, 3x3).

``BaseConvolutionLayer`` (base.py) asks ``choose_plan`` at every reshape, and
``ConvolutionLayer`` (convolution.py) asks ``winograd_fits``; both look the rules up in this
module when they call them, so a test can replace a rule to force a choice
(tests/layers/conv_helpers.py). Both plans run on either backend (backend.py); DIRECT needs
2-d windows. The measurements behind each threshold: docs/kernel-choices.md.
"""
import enum

# The DIRECT plan's largest channels per group, in and out (see choose_plan).
DIRECT_MAX_IN = 32
DIRECT_MAX_OUT = 8
# Ungrouped layers with tiny windows (LeNet conv1): the largest GEMM depth (input channels x
# taps) and output channels, and the smallest batch, that run DIRECT (see choose_plan).
DIRECT_MAX_DEPTH = 32
DIRECT_MAX_ROWS = 32
DIRECT_MIN_BATCH = 16
# The inference pass's Winograd F(4x4, 3x3): the fewest output tiles in the batch and input
# channels (see winograd_fits). Below 32 input channels its error bound is near 16 times the
# GEMM's even for plain random filters (kernels/cpu/winograd_error.py) and the time it saves
# small (docs/kernel-choices.md, "Winograd").
WINOGRAD_MIN_TILES = 16
WINOGRAD_MIN_IN = 32


class Plan(enum.Enum):
    """How a (de)convolution layer runs its passes."""
    GEMM = "gemm"      # im2col + one GEMM per group (Caffe's)
    DIRECT = "direct"  # window sums on the blob layouts, no im2col (kernels/*/depthwise)


def choose_plan(use_2d, group, in_per_group, out_per_group, taps=1, num=1):
    """DIRECT for 2-d windows whose GEMMs are tiny, GEMM otherwise. Two cases:

    * Grouped layers: more than one group, at most ``DIRECT_MAX_OUT`` output channels per
      group (the GEMM's rows) and ``DIRECT_MAX_IN`` input channels (depthwise layers,
      channel multipliers up to 8, small groups): GEMMs of a few rows per group spend their
      time in im2col and call overhead, which the window sums skip; with more channels a
      group the GEMM's rate wins.
    * One group with a GEMM depth (``in_per_group`` x ``taps``) of at most
      ``DIRECT_MAX_DEPTH``, at most ``DIRECT_MAX_ROWS`` outputs and a batch of at least
      ``DIRECT_MIN_BATCH`` (LeNet conv1: 1 x 25 -> 20): K that short keeps BLAS far from its
      rate, and im2col and the reorder passes cost as much as the GEMM; at small batches
      the GEMM plan's buffers fit in cache and it ties or wins.

    Convolution only: the caller passes batch 0 for Deconvolution (DIRECT ties or loses
    there) and in GPU mode (not measured on a device). The measurements: see
    docs/kernel-choices.md, "The DIRECT plan"."""
    if not use_2d:
        return Plan.GEMM
    if group == 1:
        if (in_per_group * taps <= DIRECT_MAX_DEPTH and out_per_group <= DIRECT_MAX_ROWS
                and num >= DIRECT_MIN_BATCH):
            return Plan.DIRECT
        return Plan.GEMM
    if in_per_group <= DIRECT_MAX_IN and out_per_group <= DIRECT_MAX_OUT:
        return Plan.DIRECT
    return Plan.GEMM


def winograd_fits(channels, tiles):
    """Whether the inference plan runs a 3x3, stride-1, one-group convolution of ``channels``
    input channels as Winograd F(4x4, 3x3) (kernels/cpu/winograd.py): ``tiles`` 4x4 output
    tiles in the batch.

    Its 36 GEMMs are (out_channels x channels) @ (channels x tiles): with few tiles, or few
    input channels, the transforms cost as much as the GEMMs save. Any number of output
    channels gains, one to hundreds: with few (SSD's box and class heads, 8 to 24), the GEMM
    plan still unfolds nine columns an input value for a product of a few rows. The
    measurements: see docs/kernel-choices.md, "Winograd"."""
    return tiles >= WINOGRAD_MIN_TILES and channels >= WINOGRAD_MIN_IN
