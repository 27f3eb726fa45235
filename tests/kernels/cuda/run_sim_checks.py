"""Compare every numba.cuda kernel with its CPU kernel under numba's CUDA simulator.

Run as a script with NUMBA_ENABLE_CUDASIM=1 in the environment (``test_cuda_kernels.py``
does): the simulator must be chosen before numba.cuda is first imported, which a pytest
process that also runs the CPU tests cannot promise. Prints ``checked <kernel>: <n> cases``
per kernel and exits non-zero on the first mismatch.

The grid is shrunk to 2 blocks of 32 threads so every thread walks its grid-stride loop
over many elements (and the simulator, one Python thread per CUDA thread, stays fast).
Shapes are tiny for the same reason. Results must match the CPU within rtol 1e-5 / atol
1e-6, and bit for bit except for LRN (a power function).
"""
import collections
import itertools
import os
import sys

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    sys.exit("run_sim_checks.py needs NUMBA_ENABLE_CUDASIM=1 set before numba is imported")

import numpy as np  # noqa: E402
from numba import config, cuda  # noqa: E402

from pycaffe_cli.cuda import launch  # noqa: E402
from pycaffe_cli.layers.kernels import geometry  # noqa: E402
from pycaffe_cli.layers.kernels.cpu import im2col as cpu_im2col  # noqa: E402
from pycaffe_cli.layers.kernels.cpu import lrn as cpu_lrn  # noqa: E402
from pycaffe_cli.layers.kernels.cpu import pooling as cpu_pool  # noqa: E402
from pycaffe_cli.layers.kernels.cuda import im2col as gpu_im2col  # noqa: E402
from pycaffe_cli.layers.kernels.cuda import lrn as gpu_lrn  # noqa: E402
from pycaffe_cli.layers.kernels.cuda import pooling as gpu_pool  # noqa: E402

assert config.ENABLE_CUDASIM, "numba.cuda was imported before the simulator was enabled"
launch.THREADS_PER_BLOCK = 32
launch.MAX_BLOCKS = 2

f32 = np.float32
RNG = np.random.default_rng(20240611)
CASES = collections.Counter()


def on_device(gpu_kernel, *arrays_and_scalars):
    """Run ``gpu_kernel`` on device copies of the numpy arguments; return the copies, back on
    the host, of every array argument (written ones included) in argument order. Arrays to
    be written start as NaN on the device so an unwritten element fails the comparison."""
    args = [cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in arrays_and_scalars]
    gpu_kernel(*args)
    return [a.copy_to_host() for a in args if hasattr(a, "copy_to_host")]


def same(name, got, want, exact=False):
    """Within rtol 1e-5 / atol 1e-6; ``exact``: bit-equal too (kernels whose float32 work is
    adds, compares and divides in the CPU kernel's order)."""
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
    if exact:
        np.testing.assert_array_equal(got, want, err_msg=name + " (not bit-equal)")


def poisoned(shape, dtype=np.float32):
    return np.full(shape, np.nan if np.dtype(dtype).kind == "f" else -7, dtype)


# --- im2col / col2im ----------------------------------------------------------------------
def check_im2col():
    num, channels, height, width = 2, 3, 7, 6
    geometries = [(3, 3, p, p, s, s, 1, 1) for s, p in itertools.product((1, 2), (0, 1))]
    geometries += [(3, 2, 1, 0, 2, 1, 2, 1), (2, 3, 0, 2, 1, 3, 1, 2)]  # non-square, dilated
    image = RNG.normal(size=num * channels * height * width).astype(f32)
    for geo, batch_major in itertools.product(geometries, (False, True)):
        kh, kw, ph, pw, sh, sw, dh, dw = geo
        out_h = geometry.conv_out_size_py(height, kh, ph, sh, dh)
        out_w = geometry.conv_out_size_py(width, kw, pw, sw, dw)
        size = channels * kh * kw * num * out_h * out_w
        dims = (num, channels, height, width) + geo
        want = np.empty(size, f32)
        cpu_im2col.im2col_batch(image, *dims, want, batch_major)
        _, got = on_device(gpu_im2col.im2col_batch, image, *dims, poisoned(size), batch_major)
        same(f"im2col_batch {geo} {batch_major}", got, want, exact=True)
        CASES["im2col_batch"] += 1

        col = RNG.normal(size=size).astype(f32)
        want = np.empty_like(image)
        cpu_im2col.col2im_batch(col, *dims, want, batch_major)
        _, got = on_device(gpu_im2col.col2im_batch, col, *dims, poisoned(image.shape),
                           batch_major)
        same(f"col2im_batch {geo} {batch_major}", got, want, exact=True)
        CASES["col2im_batch"] += 1

    # the single-image entry points
    kh, kw, ph, pw, sh, sw, dh, dw = geo = geometries[3]
    one = image[:channels * height * width]
    out = geometry.conv_out_size_py(height, kh, ph, sh, dh) * geometry.conv_out_size_py(
        width, kw, pw, sw, dw)
    want = np.empty(channels * kh * kw * out, f32)
    cpu_im2col.im2col(one, channels, height, width, *geo, want)
    _, got = on_device(gpu_im2col.im2col, one, channels, height, width, *geo,
                       poisoned(want.shape))
    same("im2col", got, want, exact=True)
    CASES["im2col"] += 1
    want_image = np.empty_like(one)
    cpu_im2col.col2im(want, channels, height, width, *geo, want_image)
    _, got = on_device(gpu_im2col.col2im, want, channels, height, width, *geo,
                       poisoned(one.shape))
    same("col2im", got, want_image, exact=True)
    CASES["col2im"] += 1


# --- pooling ------------------------------------------------------------------------------
def no_ties(shape):
    return (RNG.permutation(int(np.prod(shape))).reshape(shape) / 7.0 - 20.0).astype(f32)


def pool_windows():
    """(kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w) cases for a 7 x 6 plane."""
    cases = [(3, 3, s, s, p, p) for s, p in itertools.product((1, 2), (0, 1))]
    return cases + [(3, 2, 2, 1, 1, 0), (2, 3, 1, 3, 0, 2)]


def pooled_shape(planes, height, width, kh, kw, sh, sw, ph, pw):
    return (planes, geometry.pool_out_size_py(height, kh, ph, sh),
            geometry.pool_out_size_py(width, kw, pw, sw))


def check_pooling():
    planes, height, width = 2 * 3, 7, 6
    bottom = no_ties((planes, height, width))
    ties = np.round(RNG.normal(size=(planes, height, width))).astype(f32)
    for window in pool_windows():
        shape = pooled_shape(planes, height, width, *window)
        top, mask = np.empty(shape, f32), np.empty(shape, np.int32)
        cpu_pool.max_pool_forward(ties, top, mask, *window)
        _, got_top, got_mask = on_device(gpu_pool.max_pool_forward, ties, poisoned(shape),
                                         poisoned(shape, np.int32), *window)
        same(f"max_pool_forward ties {window}", got_top, top, exact=True)
        same(f"max_pool_forward ties mask {window}", got_mask, mask, exact=True)  # first max
        CASES["max_pool_forward"] += 1

        shape = pooled_shape(planes, height, width, *window)
        top_diff = RNG.normal(size=shape).astype(f32)
        for mask_type in (np.int32, np.float32):
            top, mask = np.empty(shape, f32), np.empty(shape, mask_type)
            cpu_pool.max_pool_forward(bottom, top, mask, *window)
            _, got_top, got_mask = on_device(gpu_pool.max_pool_forward, bottom,
                                             poisoned(shape), poisoned(shape, mask_type),
                                             *window)
            same(f"max_pool_forward {window}", got_top, top, exact=True)
            same(f"max_pool_forward mask {window}", got_mask, mask, exact=True)
            CASES["max_pool_forward"] += 1

            want = np.empty_like(bottom)
            cpu_pool.max_pool_backward(top_diff, mask, want, *window)
            _, _, got = on_device(gpu_pool.max_pool_backward, top_diff, mask,
                                  poisoned(bottom.shape), *window)
            same(f"max_pool_backward {window} {mask_type.__name__}", got, want, exact=True)
            CASES["max_pool_backward"] += 1

        top = np.empty(shape, f32)
        cpu_pool.ave_pool_forward(bottom, top, *window)
        _, got = on_device(gpu_pool.ave_pool_forward, bottom, poisoned(shape), *window)
        same(f"ave_pool_forward {window}", got, top, exact=True)
        CASES["ave_pool_forward"] += 1

        want = np.empty_like(bottom)
        cpu_pool.ave_pool_backward(top_diff, want, *window)
        _, got = on_device(gpu_pool.ave_pool_backward, top_diff, poisoned(bottom.shape),
                           *window)
        same(f"ave_pool_backward {window}", got, want, exact=True)
        CASES["ave_pool_backward"] += 1


def check_stochastic_pooling():
    planes, height, width = 2 * 3, 7, 6
    bottom = RNG.uniform(0.1, 1.0, size=(planes, height, width)).astype(f32)
    for kernel, stride in ((3, 1), (3, 2), (2, 2)):
        window = (kernel, kernel, stride, stride)
        shape = pooled_shape(planes, height, width, *window, 0, 0)
        uniform = RNG.uniform(1e-3, 1.0, size=shape).astype(f32)
        top_diff = RNG.normal(size=shape).astype(f32)

        top, rand_idx = np.empty(shape, f32), np.empty(shape, np.int32)
        cpu_pool.sto_pool_forward_train(bottom, uniform, top, rand_idx, *window)
        _, _, got_top, got_idx = on_device(gpu_pool.sto_pool_forward_train, bottom, uniform,
                                           poisoned(shape), poisoned(shape, np.int32),
                                           *window)
        same(f"sto_pool_forward_train {window}", got_top, top, exact=True)
        same(f"sto_pool_forward_train rand_idx {window}", got_idx, rand_idx, exact=True)
        CASES["sto_pool_forward_train"] += 1

        want = np.empty_like(bottom)
        cpu_pool.sto_pool_backward(top_diff, rand_idx, want, *window)
        _, _, got = on_device(gpu_pool.sto_pool_backward, top_diff, rand_idx,
                              poisoned(bottom.shape), *window)
        same(f"sto_pool_backward {window}", got, want, exact=True)
        CASES["sto_pool_backward"] += 1

        top, window_sum = np.empty(shape, f32), np.empty(shape, f32)
        cpu_pool.sto_pool_forward_test(bottom, top, window_sum, *window)
        _, got_top, got_sum = on_device(gpu_pool.sto_pool_forward_test, bottom,
                                        poisoned(shape), poisoned(shape), *window)
        same(f"sto_pool_forward_test {window}", got_top, top, exact=True)
        same(f"sto_pool_forward_test window_sum {window}", got_sum, window_sum, exact=True)
        CASES["sto_pool_forward_test"] += 1

        want = np.empty_like(bottom)
        cpu_pool.sto_pool_backward_test(bottom, top, window_sum, top_diff, want, *window)
        *_, got = on_device(gpu_pool.sto_pool_backward_test, bottom, top, window_sum,
                            top_diff, poisoned(bottom.shape), *window)
        same(f"sto_pool_backward_test {window}", got, want, exact=True)
        CASES["sto_pool_backward_test"] += 1


# --- LRN ----------------------------------------------------------------------------------
def check_lrn():
    cases = [((2, 3, 7, 6), 3, 1.0, 0.75, 1.0), ((2, 3, 7, 6), 5, 1.0, 0.75, 1.0),
             ((2, 7, 2, 3), 5, 0.5, 0.6, 2.0), ((1, 6, 3, 2), 3, 2.0, 1.0, 0.5)]
    for shape, size, alpha, beta, k in cases:
        flat = (shape[0], shape[1], shape[2] * shape[3])
        bottom = RNG.normal(size=flat).astype(f32)
        top_diff = RNG.normal(size=flat).astype(f32)
        scalars = (size, f32(f32(alpha) / f32(size)), f32(k), f32(beta))
        scale, top = np.empty(flat, f32), np.empty(flat, f32)
        cpu_lrn.lrn_across_forward(bottom, scale, top, *scalars)
        _, got_scale, got_top = on_device(gpu_lrn.lrn_across_forward, bottom, poisoned(flat),
                                          poisoned(flat), *scalars)
        same(f"lrn_across_forward scale {shape} {size}", got_scale, scale)
        same(f"lrn_across_forward top {shape} {size}", got_top, top)
        CASES["lrn_across_forward"] += 1

        scalars = (size, f32(beta), f32(2.0 * alpha * beta / size))
        want = np.empty(flat, f32)
        cpu_lrn.lrn_across_backward(bottom, top, scale, top_diff, want, *scalars)
        *_, got = on_device(gpu_lrn.lrn_across_backward, bottom, top, scale, top_diff,
                            poisoned(flat), *scalars)
        same(f"lrn_across_backward {shape} {size}", got, want)
        CASES["lrn_across_backward"] += 1


def check_launch_sizes():
    """A real launch with the default sizing (one warp-rounded block) still covers n."""
    launch.THREADS_PER_BLOCK, launch.MAX_BLOCKS = 256, 4096
    try:
        bottom = no_ties((1, 5, 5))
        top, mask = np.empty((1, 3, 3), f32), np.empty((1, 3, 3), np.int32)
        cpu_pool.max_pool_forward(bottom, top, mask, 3, 3, 2, 2, 1, 1)
        _, got, _ = on_device(gpu_pool.max_pool_forward, bottom, poisoned(top.shape),
                              poisoned(mask.shape, np.int32), 3, 3, 2, 2, 1, 1)
        same("default launch sizing", got, top, exact=True)
        CASES["default launch sizing"] += 1
    finally:
        launch.THREADS_PER_BLOCK, launch.MAX_BLOCKS = 32, 2


def main():
    for check in (check_im2col, check_pooling, check_stochastic_pooling, check_lrn,
                  check_launch_sizes):
        check()
    for name, count in CASES.items():
        print(f"checked {name}: {count} cases")


if __name__ == "__main__":
    main()
