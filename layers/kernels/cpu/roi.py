"""Region-of-interest pooling kernels (CPU, numba): Fast R-CNN's ROIPooling (max) and R-FCN's
PSROIPooling (position-sensitive average). The CUDA twins (kernels/cuda/roi.py) compile the
same per-element bodies (``*_py``).

Arrays: ``bottom`` (N, C, H, W) features, ``rois`` (R, 5) rows (batch index, x1, y1, x2, y2)
in image coordinates, ``top`` (R, C', PH, PW). Integer casts truncate toward zero and round()
rounds halves away from zero, as C does.

ROIPooling (rbgirshick/caffe-fast-rcnn roi_pooling_layer.cpp/.cu), float32 throughout:

    x1' = round(x1 * scale), ..., roi_h = max(y2' - y1' + 1, 1), bin_h = roi_h / PH
    rows of bin ph = [floor(ph * bin_h), ceil((ph + 1) * bin_h)) + y1', clipped to [0, H]
    top = the bin's first maximum (row-major, ``>``), argmax = h * W + w;
    an empty bin gives top 0 and argmax -1 (no gradient)

PSROIPooling (daijifeng001/caffe-rfcn psroi_pooling_layer.cu), float32 throughout:

    x1' = round(x1) * scale, x2' = (round(x2) + 1) * scale, roi_h = max(y2' - y1', 0.1)
    rows of bin ph = [floor(ph * bin_h + y1'), ceil((ph + 1) * bin_h + y1')), clipped
    top[r, k, ph, pw] = mean of bottom[b, (k * G + ph) * G + pw] over the bin (0 if empty)

Backward passes: ROIPooling routes each top diff to its argmax; PSROIPooling spreads
diff / bin_area over the bin. On the CPU they walk channel by channel, each channel's ROIs
in order, on one thread (a fraction of the forward's work: threads over channels ran slower,
e.g. 30 ms against 9 ms for 128 ROIs on a (1, 512, 38, 50) map on 2 cores, and cost
seconds of compilation); the GPU gathers per bottom element in the same order, so both add
the same float32 terms in the same sequence.
"""
import numpy as np
from numba import njit, prange

FLT_MAX = float(np.finfo(np.float32).max)


# --- scalar helpers (plain Python: compiled for either target) ------------------------------
def round_int_py(x):
    """C's round() of a float32, as an int: halves away from zero (float32 maths only: the
    fraction x - trunc(x) is exact)."""
    whole = int(x)
    fraction = x - np.float32(whole)
    if fraction >= np.float32(0.5):
        whole += 1
    elif fraction <= np.float32(-0.5):
        whole -= 1
    return whole


def floor_int_py(x):
    """floor of a float32, as an int."""
    value = int(x)
    if np.float32(value) > x:
        value -= 1
    return value


def ceil_int_py(x):
    """ceil of a float32, as an int."""
    value = int(x)
    if np.float32(value) < x:
        value += 1
    return value


round_int = njit(cache=True, inline="always")(round_int_py)
floor_int = njit(cache=True, inline="always")(floor_int_py)
ceil_int = njit(cache=True, inline="always")(ceil_int_py)


def roi_box_py(rois, r, spatial_scale, pooled_h, pooled_w):
    """ROIPooling's geometry of ROI ``r``: (batch, y1', x1', bin_h, bin_w, y2', x2')."""
    start_w = round_int(rois[r, 1] * spatial_scale)
    start_h = round_int(rois[r, 2] * spatial_scale)
    end_w = round_int(rois[r, 3] * spatial_scale)
    end_h = round_int(rois[r, 4] * spatial_scale)
    roi_h = max(end_h - start_h + 1, 1)
    roi_w = max(end_w - start_w + 1, 1)
    bin_h = np.float32(roi_h) / np.float32(pooled_h)
    bin_w = np.float32(roi_w) / np.float32(pooled_w)
    return int(rois[r, 0]), start_h, start_w, bin_h, bin_w


def roi_bin_py(start, bin_size, p, limit):
    """ROIPooling's [first, last) rows (or columns) of bin ``p``, clipped to [0, limit]."""
    first = floor_int(np.float32(p) * bin_size) + start
    last = ceil_int(np.float32(p + 1) * bin_size) + start
    return min(max(first, 0), limit), min(max(last, 0), limit)


def psroi_box_py(rois, r, spatial_scale, pooled_h, pooled_w):
    """PSROIPooling's geometry of ROI ``r``: (batch, y1', x1', bin_h, bin_w), floats."""
    start_w = np.float32(round_int(rois[r, 1])) * spatial_scale
    start_h = np.float32(round_int(rois[r, 2])) * spatial_scale
    end_w = np.float32(round_int(rois[r, 3]) + 1) * spatial_scale
    end_h = np.float32(round_int(rois[r, 4]) + 1) * spatial_scale
    roi_w = max(end_w - start_w, np.float32(0.1))
    roi_h = max(end_h - start_h, np.float32(0.1))
    return (int(rois[r, 0]), start_h, start_w, roi_h / np.float32(pooled_h),
            roi_w / np.float32(pooled_w))


def psroi_bin_py(start, bin_size, p, limit):
    """PSROIPooling's [first, last) rows (or columns) of bin ``p``, clipped to [0, limit]."""
    first = floor_int(np.float32(p) * bin_size + start)
    last = ceil_int(np.float32(p + 1) * bin_size + start)
    return min(max(first, 0), limit), min(max(last, 0), limit)


roi_box = njit(cache=True, inline="always")(roi_box_py)
roi_bin = njit(cache=True, inline="always")(roi_bin_py)
psroi_box = njit(cache=True, inline="always")(psroi_box_py)
psroi_bin = njit(cache=True, inline="always")(psroi_bin_py)


# --- per-element bodies ---------------------------------------------------------------------
def roi_pool_forward_at_py(bottom, rois, top, argmax, spatial_scale, r, c, ph, pw):
    """top and argmax at (r, c, ph, pw): the bin's first maximum and its in-plane index."""
    height, width = bottom.shape[2], bottom.shape[3]
    batch, start_h, start_w, bin_h, bin_w = roi_box(rois, r, spatial_scale, top.shape[2],
                                                    top.shape[3])
    hstart, hend = roi_bin(start_h, bin_h, ph, height)
    wstart, wend = roi_bin(start_w, bin_w, pw, width)
    if hend <= hstart or wend <= wstart:
        top[r, c, ph, pw] = np.float32(0.0)
        argmax[r, c, ph, pw] = -1
        return
    best = np.float32(-FLT_MAX)
    best_index = -1
    for h in range(hstart, hend):
        for w in range(wstart, wend):
            if bottom[batch, c, h, w] > best:
                best = bottom[batch, c, h, w]
                best_index = h * width + w
    top[r, c, ph, pw] = best
    argmax[r, c, ph, pw] = best_index


def psroi_pool_forward_at_py(bottom, rois, top, mapping, spatial_scale, group_size, r, k,
                             ph, pw):
    """top and mapping at (r, k, ph, pw): the mean of the bin in channel
    (k * group_size + ph) * group_size + pw, and that channel."""
    height, width = bottom.shape[2], bottom.shape[3]
    batch, start_h, start_w, bin_h, bin_w = psroi_box(rois, r, spatial_scale, top.shape[2],
                                                      top.shape[3])
    hstart, hend = psroi_bin(start_h, bin_h, ph, height)
    wstart, wend = psroi_bin(start_w, bin_w, pw, width)
    c = (k * group_size + ph) * group_size + pw
    total = np.float32(0.0)
    for h in range(hstart, hend):
        for w in range(wstart, wend):
            total += bottom[batch, c, h, w]
    if hend <= hstart or wend <= wstart:
        top[r, k, ph, pw] = np.float32(0.0)
    else:
        top[r, k, ph, pw] = total / np.float32((hend - hstart) * (wend - wstart))
    mapping[r, k, ph, pw] = c


# The GPU's backward bodies: one bottom element each, gathering over the ROIs in order.
def roi_pool_backward_at_py(top_diff, argmax, rois, spatial_scale, bottom_diff, n, c, h, w):
    """bottom_diff at (n, c, h, w): the top diffs of the bins whose argmax is this element."""
    width = bottom_diff.shape[3]
    pooled_h, pooled_w = top_diff.shape[2], top_diff.shape[3]
    index = h * width + w
    gradient = np.float32(0.0)
    for r in range(rois.shape[0]):
        if int(rois[r, 0]) != n:
            continue
        batch, start_h, start_w, bin_h, bin_w = roi_box(rois, r, spatial_scale, pooled_h,
                                                        pooled_w)
        phstart = max(floor_int(np.float32(h - start_h) / bin_h) - 1, 0)
        phend = min(ceil_int(np.float32(h - start_h + 1) / bin_h) + 1, pooled_h)
        pwstart = max(floor_int(np.float32(w - start_w) / bin_w) - 1, 0)
        pwend = min(ceil_int(np.float32(w - start_w + 1) / bin_w) + 1, pooled_w)
        for ph in range(phstart, phend):
            for pw in range(pwstart, pwend):
                if argmax[r, c, ph, pw] == index:
                    gradient += top_diff[r, c, ph, pw]
    bottom_diff[n, c, h, w] = gradient


def psroi_pool_backward_at_py(top_diff, rois, bottom_diff, spatial_scale, group_size, n, c,
                              h, w):
    """bottom_diff at (n, c, h, w): top diff / bin area of each ROI whose bin holds it."""
    height, width = bottom_diff.shape[2], bottom_diff.shape[3]
    pooled_h, pooled_w = top_diff.shape[2], top_diff.shape[3]
    k = c // (group_size * group_size)
    ph = c // group_size % group_size
    pw = c % group_size
    gradient = np.float32(0.0)
    for r in range(rois.shape[0]):
        if int(rois[r, 0]) != n:
            continue
        batch, start_h, start_w, bin_h, bin_w = psroi_box(rois, r, spatial_scale, pooled_h,
                                                          pooled_w)
        hstart, hend = psroi_bin(start_h, bin_h, ph, height)
        wstart, wend = psroi_bin(start_w, bin_w, pw, width)
        if hstart <= h and h < hend and wstart <= w and w < wend:
            gradient += top_diff[r, k, ph, pw] / np.float32((hend - hstart) * (wend - wstart))
    bottom_diff[n, c, h, w] = gradient


_roi_pool_forward_at = njit(cache=True, inline="always")(roi_pool_forward_at_py)
_psroi_pool_forward_at = njit(cache=True, inline="always")(psroi_pool_forward_at_py)


# --- drivers --------------------------------------------------------------------------------
@njit(cache=True, parallel=True)
def roi_pool_forward(bottom, rois, top, argmax, spatial_scale):
    """Fill ``top`` (R, C, PH, PW) float32 and ``argmax`` (same shape, int32)."""
    num_rois, channels, pooled_h, pooled_w = top.shape
    for job in prange(num_rois * channels):
        r = job // channels
        c = job % channels
        for ph in range(pooled_h):
            for pw in range(pooled_w):
                _roi_pool_forward_at(bottom, rois, top, argmax, spatial_scale, r, c, ph, pw)


@njit(cache=True)
def roi_pool_backward(top_diff, argmax, rois, bottom_diff, spatial_scale):
    """bottom_diff (N, C, H, W) = the sum of the top diffs whose argmax is each element
    (``spatial_scale`` is unused here: the argmax holds the geometry; the GPU twin needs it)."""
    num_rois, channels, pooled_h, pooled_w = top_diff.shape
    num, height, width = bottom_diff.shape[0], bottom_diff.shape[2], bottom_diff.shape[3]
    for c in range(channels):
        for n in range(num):
            for h in range(height):
                for w in range(width):
                    bottom_diff[n, c, h, w] = np.float32(0.0)
        for r in range(num_rois):
            batch = int(rois[r, 0])
            for ph in range(pooled_h):
                for pw in range(pooled_w):
                    index = argmax[r, c, ph, pw]
                    if index >= 0:
                        bottom_diff[batch, c, index // width, index % width] += \
                            top_diff[r, c, ph, pw]


@njit(cache=True, parallel=True)
def psroi_pool_forward(bottom, rois, top, mapping, spatial_scale, group_size):
    """Fill ``top`` (R, K, G, G) float32 and ``mapping`` (same shape, int32)."""
    num_rois, output_dim, pooled_h, pooled_w = top.shape
    for job in prange(num_rois * output_dim):
        r = job // output_dim
        k = job % output_dim
        for ph in range(pooled_h):
            for pw in range(pooled_w):
                _psroi_pool_forward_at(bottom, rois, top, mapping, spatial_scale, group_size,
                                       r, k, ph, pw)


@njit(cache=True)
def psroi_pool_backward(top_diff, rois, bottom_diff, spatial_scale, group_size):
    """bottom_diff (N, C, H, W): each ROI's top diff / bin area added over its bin, in the
    bin's channel (channel c holds output k = c // G^2 at bin (c // G % G, c % G))."""
    num_rois, pooled_h, pooled_w = top_diff.shape[0], top_diff.shape[2], top_diff.shape[3]
    num, channels, height, width = bottom_diff.shape
    for c in range(channels):
        for n in range(num):
            for h in range(height):
                for w in range(width):
                    bottom_diff[n, c, h, w] = np.float32(0.0)
        k = c // (group_size * group_size)
        ph = c // group_size % group_size
        pw = c % group_size
        for r in range(num_rois):
            batch, start_h, start_w, bin_h, bin_w = psroi_box(rois, r, spatial_scale,
                                                              pooled_h, pooled_w)
            hstart, hend = psroi_bin(start_h, bin_h, ph, height)
            wstart, wend = psroi_bin(start_w, bin_w, pw, width)
            if hend <= hstart or wend <= wstart:
                continue
            value = top_diff[r, k, ph, pw] / np.float32((hend - hstart) * (wend - wstart))
            for h in range(hstart, hend):
                for w in range(wstart, wend):
                    bottom_diff[batch, c, h, w] += value
