"""The direct convolution's gradients in one pass over the output-side gradient (CPU, numba).

From the output-side gradient D, ``backward`` computes the three gradients, each where it is
asked for, reading D once instead of three times (docs/kernel-choices.md, "Direct
convolution"). One job per group and slice of the images (a group's images are split into
slices only where there are fewer groups than ``prange`` parts: group 1, an ordinary
convolution with a tiny window, see layers/convolution/plan.py). For each image the job copies
D_m onto grids (phases.py; scratch columns 0), then, each where it is asked for:

- the bias: each output plane's sum in numpy's pairwise order, summed image by image after
  the jobs (``layout.channel_sums``'s numbers);
- ``weight_grad``: dW[m, c, t] += the dot product of D_m with phases_c[base[t]:], four
  outputs m at a time sharing each load of the phases, float32 dot products (``reassoc``
  lets LLVM split them over SIMD lanes; the function is not inlined, so the other sums keep
  their order) added into float64 totals, the slices' totals summed in order, then
  ``weight_diff += total`` (the GEMM path's dW += grad);
- ``backward_data``, the adjoint: d phases_c[base[t] + j] += weights[m, c, t] D_m[j] for
  each output m and tap t in turn, four outputs a pass where a group has four or more
  (their products summed, then added), then im = the image pixels of d phases. A job owns
  its images' planes, so no two threads write one element.

``backward_data`` and ``weight_grad`` are ``backward`` asked for one gradient each: the CUDA
twins of those names (kernels/cuda/depthwise.py), which the GPU backend runs in turn where
the CPU runs ``backward``.
"""
import numpy as np
from numba import float32, njit, prange, uintp

from pycaffe_cli.layers.kernels.cpu.depthwise.phases import CHUNK, phase_layout, \
    phase_places, phase_rows
from pycaffe_cli.layers.kernels.cpu.layout import pairwise_sum, prange_parts


@njit(cache=True, inline="always")
def _scatter_taps(x, x0, base, weights, first, taps, y, start, stop):
    """x[x0 + base[t] + j] += weights[first + t] y[j] for each tap t in turn, j in [start,
    stop): one pass per tap, which no two positions of write the same element."""
    for t in range(taps):
        w0, b0 = weights[first + t], x0 + base[t]
        for j in range(start, stop):
            x[uintp(b0 + j)] += w0 * y[uintp(j)]


@njit(cache=True, inline="always")
def _scatter_taps4(x, x0, base, weights, first, wstep, taps, y, step, start, stop):
    """``_scatter_taps`` for four outputs i < 4 at once (y[i step + j], weights at
    first + i wstep): x[x0 + base[t] + j] += the four products, summed, one pass per tap."""
    for t in range(taps):
        w0, w1 = weights[first + t], weights[first + wstep + t]
        w2, w3 = weights[first + 2 * wstep + t], weights[first + 3 * wstep + t]
        b0 = x0 + base[t]
        for j in range(start, stop):
            x[uintp(b0 + j)] += (w0 * y[uintp(j)] + w1 * y[uintp(step + j)]
                                 + w2 * y[uintp(2 * step + j)] + w3 * y[uintp(3 * step + j)])


@njit(cache=True, inline="always")
def _dot(y, y0, x, x0, start, stop):
    """float32 sum of y[y0 + j] x[x0 + j] for j in [start, stop)."""
    total = float32(0.0)
    for j in range(start, stop):
        total += y[uintp(y0 + j)] * x[uintp(x0 + j)]
    return total


@njit(cache=True, inline="always")
def _dot4(y, y0, step, x, x0, start, stop):
    """The float32 sums of y[y0 + i step + j] x[x0 + j] for i < 4, j in [start, stop): four
    ``_dot``s that share each load of x."""
    a0 = a1 = a2 = a3 = float32(0.0)
    for j in range(start, stop):
        v = x[uintp(x0 + j)]
        a0 += y[uintp(y0 + j)] * v
        a1 += y[uintp(y0 + step + j)] * v
        a2 += y[uintp(y0 + 2 * step + j)] * v
        a3 += y[uintp(y0 + 3 * step + j)] * v
    return a0, a1, a2, a3


@njit(cache=True, inline="always")
def _grid_dots(totals, grids, phases, base, per_out, per_in, taps, size, block, start, stop):
    """totals[(mo per_in + c) taps + t] += the dot product of grid mo with channel c's phases
    at tap t, over grid positions [start, stop): four outputs at a time (``_dot4``), then the
    rest one by one."""
    step = per_in * taps  # from filter (mo, c, t) to (mo + 1, c, t)
    whole = per_out - per_out % 4
    for mo in range(0, whole, 4):
        for k in range(mo * step, (mo + 1) * step):  # filter (mo, c), tap t
            t, c = k % taps, k // taps - mo * per_in
            a0, a1, a2, a3 = _dot4(grids, mo * size, size, phases, c * block + base[t], start,
                                   stop)
            totals[k] += a0
            totals[k + step] += a1
            totals[k + 2 * step] += a2
            totals[k + 3 * step] += a3
    for k in range(whole * step, per_out * step):
        t, c = k % taps, (k // taps) % per_in
        totals[k] += _dot(grids, (k // step) * size, phases, c * block + base[t], start, stop)


@njit(cache=True, inline="always")
def _to_grid(out, src, out_h, out_w, qw, grid, dst):
    """grid[dst + oh qw + ow] = out[src + oh out_w + ow] (the scratch columns left as they
    are)."""
    for oh in range(out_h):
        for ow in range(out_w):
            grid[uintp(dst + oh * qw + ow)] = out[uintp(src + oh * out_w + ow)]


@njit(cache=True, nogil=True, fastmath={"reassoc"})
def _add_grid_dots(totals, grids, phases, base, per_out, per_in, taps, size, block):
    """``_grid_dots`` over the whole grid, chunk by chunk. Not inlined: its float32 dot
    products may be split over SIMD lanes (``reassoc``), the caller's sums may not."""
    for start in range(0, size, CHUNK):
        _grid_dots(totals, grids, phases, base, per_out, per_in, taps, size, block, start,
                   min(start + CHUNK, size))


@njit(cache=True, inline="always")
def _scatter_outputs(phases, grids, g, per_out, per_in, taps, size, block, base, weights):
    """phases += the adjoint of the forward taps for group g's outputs, their gradients on
    ``grids`` (one grid of ``size`` per output): outputs four at a time, then one by one;
    per chunk of the grid, channel by channel."""
    m, whole = g * per_out, g * per_out + per_out - per_out % 4
    while m < (g + 1) * per_out:
        rows = 4 if m < whole else 1
        grid0 = (m - g * per_out) * size
        for start in range(0, size, CHUNK):
            stop = min(start + CHUNK, size)
            for c in range(per_in):
                if rows == 4:
                    _scatter_taps4(phases, c * block, base, weights, (m * per_in + c) * taps,
                                   per_in * taps, taps, grids[grid0:], size, start, stop)
                else:
                    _scatter_taps(phases, c * block, base, weights, (m * per_in + c) * taps,
                                  taps, grids[grid0:], start, stop)
        m += rows


@njit(cache=True, parallel=True, nogil=True)
def _backward_kernel(im, out, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                     stride_h, stride_w, dilation_h, dilation_w, weights, out_channels, group,
                     weight_diff, im_diff, bias_diff, wanted, splits, parts):
    out_h, out_w, qh, qw, size, base = phase_layout(height, width, kernel_h, kernel_w, pad_h,
                                                    pad_w, stride_h, stride_w, dilation_h,
                                                    dilation_w)
    places = phase_places(height, width, pad_h, pad_w, stride_h, stride_w, qh, qw)
    per_in, per_out = channels // group, out_channels // group
    block, taps, plane = stride_h * stride_w * qh * qw, kernel_h * kernel_w, out_h * out_w
    want_weights, want_data, want_bias = wanted
    filters = per_out * per_in * taps
    totals = np.zeros((group * splits, filters if want_weights else 0), np.float64)
    plane_sums = np.empty(num * out_channels if want_bias else 0, np.float32)
    for part in prange(parts):
        phases = np.zeros(per_in * block if want_weights else 0, np.float32)  # padding: 0
        d_phases = np.empty(per_in * block if want_data else 0, np.float32)
        grids = np.zeros(per_out * size, np.float32)  # the scratch columns stay 0
        for job in range(part * group * splits // parts, (part + 1) * group * splits // parts):
            g, s = job // splits, job % splits
            for n in range(s * num // splits, (s + 1) * num // splits):
                first_out = n * out_channels + g * per_out
                if want_bias:
                    for m in range(first_out, first_out + per_out):
                        plane_sums[m] = pairwise_sum(out, m * plane, plane)
                for mo in range(per_out):
                    _to_grid(out, (first_out + mo) * plane, out_h, out_w, qw, grids, mo * size)
                first_in = (n * channels + g * per_in) * height * width
                if want_weights:
                    for c in range(per_in):
                        phase_rows(phases, c * block, im, first_in + c * height * width, width,
                                   stride_w, places, True)
                    _add_grid_dots(totals[job], grids, phases, base, per_out, per_in, taps,
                                   size, block)
                if want_data:
                    d_phases[:] = 0
                    _scatter_outputs(d_phases, grids, g, per_out, per_in, taps, size, block,
                                     base, weights)
                    for c in range(per_in):
                        phase_rows(d_phases, c * block, im_diff, first_in + c * height * width,
                                   width, stride_w, places, False)
    if want_weights:
        for g in range(group):  # the slices' totals in order, then dW += total
            for k in range(filters):
                total = 0.0
                for s in range(splits):
                    total += totals[g * splits + s, k]
                weight_diff[g * filters + k] += float32(total)
    if want_bias:
        for m in range(out_channels):  # image by image, as layout.channel_sums
            bias_total = float32(0.0)
            for n in range(num):
                bias_total += plane_sums[n * out_channels + m]
            bias_diff[m] += bias_total


def backward(im, out, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
             stride_h, stride_w, dilation_h, dilation_w, weights, out_channels, group,
             weight_diff=None, im_diff=None, bias_diff=None):
    """The gradients from the output-side ``out``, in one pass over it, each where its array
    is given: ``weight_diff`` += as ``weight_grad``, ``im_diff`` = as ``backward_data``,
    ``bias_diff`` += the sum of each output channel (image by image, each image's positions
    in numpy's pairwise order: the numbers of ``out.sum(axis=(0, 2))``). ``im`` (the input
    images) is read only for the weights' gradient."""
    wanted = (weight_diff is not None, im_diff is not None, bias_diff is not None)
    unused = out[:0]
    splits = max(1, min(num, prange_parts(num) // group))
    _backward_kernel(unused if im is None else im, out, num, channels, height, width, kernel_h,
                     kernel_w, pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w,
                     unused if weights is None else weights, out_channels, group,
                     unused if weight_diff is None else weight_diff,
                     unused if im_diff is None else im_diff,
                     unused if bias_diff is None else bias_diff, wanted, splits,
                     prange_parts(group * splits))


def backward_data(out, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                  stride_h, stride_w, dilation_h, dilation_w, weights, out_channels, group, im):
    """im = the adjoint of ``forward`` applied to ``out`` (the input-side gradient from the
    output-side one); ``im`` is overwritten."""
    backward(None, out, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
             stride_h, stride_w, dilation_h, dilation_w, weights, out_channels, group,
             im_diff=im)


def weight_grad(im, out, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
                stride_h, stride_w, dilation_h, dilation_w, out_channels, group, weight_diff):
    """weight_diff[m, c, ki, kj] += sum over n, oh, ow of out[n, m, oh, ow] times the input
    element tap (ki, kj) of output (oh, ow) reads. With fewer groups than ``prange`` parts
    (group 1: an ordinary convolution), each group's images are split into slices summed
    apart, so that every thread has work."""
    backward(im, out, num, channels, height, width, kernel_h, kernel_w, pad_h, pad_w,
             stride_h, stride_w, dilation_h, dilation_w, None, out_channels, group,
             weight_diff=weight_diff)
