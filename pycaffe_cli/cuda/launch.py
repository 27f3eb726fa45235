"""Launch sizing for grid-stride CUDA kernels (Caffe's CAFFE_GET_BLOCKS / CUDA_KERNEL_LOOP).

Every grid-stride kernel in pycaffe takes the number of work items ``n`` as its first argument
and walks them with a grid-stride loop::

    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        body(..., index)

so any grid covers any ``n``: the grid only has to be big enough to fill the device. Blocks
are capped (a grid-stride loop needs no more than a few waves of blocks) and tiny launches
get one warp-rounded block instead of a mostly idle 256-thread one.

This module imports no CUDA: the sizing is plain arithmetic, testable anywhere.
"""
THREADS_PER_BLOCK = 256
MAX_BLOCKS = 4096  # 32 blocks of 256 threads per SM on a 128-SM device: enough waves
WARP = 32


def blocks_threads(n, threads=None, max_blocks=None):
    """(blocks, threads per block) for a grid-stride loop over ``n`` > 0 items.

    ``threads`` (default ``THREADS_PER_BLOCK``) is rounded down to whole warps and, for ``n``
    below one block, to the warps ``n`` needs; ``blocks`` is ceil(n / threads) capped at
    ``max_blocks`` (default ``MAX_BLOCKS``). The defaults are read at call time, so a test can
    shrink the grid to make every thread loop.
    """
    threads = THREADS_PER_BLOCK if threads is None else threads
    max_blocks = MAX_BLOCKS if max_blocks is None else max_blocks
    if n <= 0:
        raise ValueError(f"a launch needs at least one work item, got n = {n}")
    if threads < WARP or max_blocks < 1:
        raise ValueError(f"need threads >= {WARP} and max_blocks >= 1, got {threads}, "
                         f"{max_blocks}")
    threads = min(threads // WARP, (n + WARP - 1) // WARP) * WARP
    blocks = min((n + threads - 1) // threads, max_blocks)
    return blocks, threads


def launch(kernel, n, *args):
    """Run ``kernel(n, *args)`` over ``n`` work items; nothing is launched for ``n`` == 0
    (CUDA rejects an empty grid)."""
    if n == 0:
        return
    blocks, threads = blocks_threads(n)
    kernel[blocks, threads](n, *args)
