"""Which plan a (de)convolution layer runs: im2col + GEMMs (Caffe's) or direct window sums.

``BaseConvolutionLayer`` (base_convolution.py) picks one per layer at every reshape:
``force_plan`` where a test or a timing sets it, else ``choose_plan``. Both plans run on
either backend (base_convolution_backend.py); DIRECT needs 2-d windows.
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
# The inference pass's Winograd F(4x4, 3x3): the fewest output tiles in the batch, input and
# output channels (see winograd_fits). Below 32 input channels its error bound is near 16
# times the GEMM's even for plain random filters (kernels/cpu/winograd_error.py) and the
# time it saves small (16 -> 64 channels at 56x56: 0.97 -> 0.91 ms).
WINOGRAD_MIN_TILES = 16
WINOGRAD_MIN_IN = 32
WINOGRAD_MIN_OUT = 32


class Plan(enum.Enum):
    """How a (de)convolution layer runs its passes."""
    GEMM = "gemm"      # im2col + one GEMM per group (Caffe's)
    DIRECT = "direct"  # window sums on the blob layouts, no im2col (kernels/*/depthwise.py)


def choose_plan(use_2d, group, in_per_group, out_per_group, taps=1, num=1):
    """DIRECT for 2-d windows whose GEMMs are tiny, GEMM otherwise. Two cases:

    * Grouped layers: more than one group, at most ``DIRECT_MAX_OUT`` output channels per
      group (the GEMM's rows) and ``DIRECT_MAX_IN`` input channels (depthwise layers,
      channel multipliers up to 8, small groups). Measured on the CPU at batch 1 (the GEMM
      path's best case: its column buffer fits in cache), fwd + bwd: DIRECT wins every
      depthwise layer of MobileNet v2 by 2-9x and groups of (in x out) 2x2 .. 32x4 by 1.2-4x,
      ties 8x8, 32x8 and 1x16, and loses 8x16, 16x16, 64x8 and 32x32 (by up to 2x). At batch
      10 it wins all of those but 32x32.
    * One group with a GEMM depth (``in_per_group`` x ``taps``) of at most
      ``DIRECT_MAX_DEPTH``, at most ``DIRECT_MAX_ROWS`` outputs and a batch of at least
      ``DIRECT_MIN_BATCH`` (LeNet conv1: 1 x 25 -> 20): K that short keeps BLAS far from its
      rate, and im2col and the reorder passes cost as much as the GEMM. Measured on the
      2-core CPU (shared; best of 25, ms, fwd / weight grad / data grad), one thread and
      two: LeNet conv1 at batch 64, 1 thread GEMM 1.49 / 2.25 / 1.58, DIRECT 0.97 / 1.73 /
      1.36; 2 threads GEMM 0.78-0.99 / 2.0-2.3 / 0.89-1.17, DIRECT 0.54-0.86 / 1.25-1.67 /
      0.86; 1 -> 8 3x3 pad 1 (28x28, batch 64) DIRECT 1.4 vs GEMM 2.2 (1 thread);
      3 -> 16 3x3 (32x32) DIRECT 6.4 vs 12.3. Ties or losses: 4 -> 20 3x3 (K 36) 7.3 vs 6.2,
      2 -> 20 5x5 (K 50) 12.4 vs 8.0, 1 -> 64 5x5 21 vs 21; LeNet conv1 at batch 1 (0.10 vs
      0.07) and 10 (0.63 vs 0.50 on one thread; two threads 0.49 vs 0.58). After the
      DIRECT kernels' four-outputs-a-pass weight and data gradients (1 thread, fwd + both
      grads): LeNet conv1 3.2 vs GEMM 4.6-4.8, 2 -> 20 5x5 6.5 vs 8.0, 4 -> 20 3x3 5.2-6.7
      vs 5.8-6.3, batch 10 0.51 vs 0.51, batch 1 0.082 vs 0.073. Convolution only: the
      caller passes batch 0 for Deconvolution (DIRECT ties or loses by up to 1.15x there)
      and in GPU mode (not measured on a device)."""
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


def winograd_fits(channels, out_channels, tiles):
    """Whether the inference plan runs a 3x3, stride-1, one-group convolution as Winograd
    F(4x4, 3x3) (kernels/cpu/winograd.py): ``tiles`` 4x4 output tiles in the batch.

    Its 36 GEMMs are (out_channels x channels) @ (channels x tiles): with few tiles, or few
    channels, they run far below BLAS's rate, and the transforms cost as much as the GEMMs
    save. Measured on the 2-core CPU (inference pass, ms, GEMM plan / Winograd, batch 1
    unless said): 64 -> 192 at 56x56 3.76 / 2.47 (batch 10: 40.5 / 20.0), 64 -> 64 at 56x56
    2.22 / 1.37, 128 -> 128 at 28x28 1.43 / 0.97, 16 -> 64 at 56x56 0.97 / 0.91 (batch 10:
    4.9 / 4.4), 32 -> 128 at 28x28 (batch 10) 3.7 / 2.9, 48 -> 192 at 14x14 (16 tiles)
    0.56 / 0.44, 128 -> 128 at 14x14 0.54 / 0.46; losses: 16 -> 16 at 56x56 0.21 / 0.26,
    3 -> 64 at 224x224 2.7 / 5.6, 8 -> 16 at 28x28 0.11 / 0.15, 7x7 outputs (4 tiles):
    256 -> 256 0.69 / 0.91, 192 -> 384 0.68 / 1.22, 512 -> 512 at batch 2 (8 tiles) 3.5 /
    4.6 (at batch 4, 16 tiles: 6.1 / 4.9)."""
    return tiles >= WINOGRAD_MIN_TILES and channels >= WINOGRAD_MIN_IN \
        and out_channels >= WINOGRAD_MIN_OUT
