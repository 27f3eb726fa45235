"""Region-of-interest pooling on the GPU (numba.cuda): the CPU kernels' names, signatures and
maths (kernels/cpu/roi.py, whose module doc gives the formulas).

Arrays are device arrays: ``bottom`` / ``bottom_diff`` (N, C, H, W), ``rois`` (R, 5),
``top`` / ``top_diff`` / ``argmax`` / ``mapping`` (R, C', PH, PW). The forward passes run
one thread per top element with the CPU's per-element bodies. The backward passes GATHER,
one thread per bottom element, visiting the ROIs in order (the CPU's order, so the float32
sums agree with it), and need no atomics (R-FCN's PSROIPooling backward scatters with
atomicAdd):

* ROIPooling: for each ROI of the element's image, the bins that can hold row h are
  [floor((h - y1') / bin_h) - 1, ceil((h - y1' + 1) / bin_h) + 1) (one spare bin each side
  against float rounding), likewise for columns; a bin whose argmax is the element adds its
  top diff.
* PSROIPooling: channel c is read by output k = c // G^2 at bin (c // G % G, c % G) only;
  each ROI whose bin holds the element adds top diff / bin area.
"""
import numpy as np
from numba import cuda

from pycaffe_cli.cuda.device import device_function, split_index
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.kernels.cpu.roi import (ceil_int_py, floor_int_py, psroi_bin_py,
                                                psroi_box_py, psroi_pool_backward_at_py,
                                                psroi_pool_forward_at_py, roi_bin_py,
                                                roi_box_py, roi_pool_backward_at_py,
                                                roi_pool_forward_at_py, round_int_py)

_round_int = device_function(round_int_py)
_floor_int = device_function(floor_int_py)
_ceil_int = device_function(ceil_int_py)
_roi_box = device_function(roi_box_py, round_int=_round_int)
_roi_bin = device_function(roi_bin_py, floor_int=_floor_int, ceil_int=_ceil_int)
_psroi_box = device_function(psroi_box_py, round_int=_round_int)
_psroi_bin = device_function(psroi_bin_py, floor_int=_floor_int, ceil_int=_ceil_int)
_roi_pool_forward_at = device_function(roi_pool_forward_at_py, roi_box=_roi_box,
                                       roi_bin=_roi_bin)
_psroi_pool_forward_at = device_function(psroi_pool_forward_at_py, psroi_box=_psroi_box,
                                         psroi_bin=_psroi_bin)
_roi_pool_backward_at = device_function(roi_pool_backward_at_py, roi_box=_roi_box,
                                        floor_int=_floor_int, ceil_int=_ceil_int)
_psroi_pool_backward_at = device_function(psroi_pool_backward_at_py, psroi_box=_psroi_box,
                                          psroi_bin=_psroi_bin)


@cuda.jit(cache=True)
def _roi_pool_forward_kernel(n, bottom, rois, top, argmax, spatial_scale):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        plane, ph, pw = split_index(index, top.shape[2], top.shape[3])
        r, c = plane // top.shape[1], plane % top.shape[1]
        _roi_pool_forward_at(bottom, rois, top, argmax, spatial_scale, r, c, ph, pw)


@cuda.jit(cache=True)
def _roi_pool_backward_kernel(n, top_diff, argmax, rois, spatial_scale, bottom_diff):
    shape = bottom_diff.shape
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        plane, h, w = split_index(index, shape[2], shape[3])
        b, c = plane // shape[1], plane % shape[1]
        _roi_pool_backward_at(top_diff, argmax, rois, spatial_scale, bottom_diff, b, c, h, w)


@cuda.jit(cache=True)
def _psroi_pool_forward_kernel(n, bottom, rois, top, mapping, spatial_scale, group_size):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        plane, ph, pw = split_index(index, top.shape[2], top.shape[3])
        r, k = plane // top.shape[1], plane % top.shape[1]
        _psroi_pool_forward_at(bottom, rois, top, mapping, spatial_scale, group_size, r, k,
                               ph, pw)


@cuda.jit(cache=True)
def _psroi_pool_backward_kernel(n, top_diff, rois, bottom_diff, spatial_scale, group_size):
    shape = bottom_diff.shape
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        plane, h, w = split_index(index, shape[2], shape[3])
        b, c = plane // shape[1], plane % shape[1]
        _psroi_pool_backward_at(top_diff, rois, bottom_diff, spatial_scale, group_size, b, c,
                                h, w)


def roi_pool_forward(bottom, rois, top, argmax, spatial_scale):
    """Fill ``top`` (R, C, PH, PW) float32 and ``argmax`` (same shape, int32)."""
    launch(_roi_pool_forward_kernel, top.size, bottom, rois, top, argmax,
           np.float32(spatial_scale))


def roi_pool_backward(top_diff, argmax, rois, bottom_diff, spatial_scale):
    """Write ``bottom_diff`` (N, C, H, W) from the top diffs through the argmax."""
    launch(_roi_pool_backward_kernel, bottom_diff.size, top_diff, argmax, rois,
           np.float32(spatial_scale), bottom_diff)


def psroi_pool_forward(bottom, rois, top, mapping, spatial_scale, group_size):
    """Fill ``top`` (R, K, G, G) float32 and ``mapping`` (same shape, int32)."""
    launch(_psroi_pool_forward_kernel, top.size, bottom, rois, top, mapping,
           np.float32(spatial_scale), int(group_size))


def psroi_pool_backward(top_diff, rois, bottom_diff, spatial_scale, group_size):
    """Write ``bottom_diff`` (N, C, H, W): each ROI's top diff / bin area over its bin."""
    launch(_psroi_pool_backward_kernel, bottom_diff.size, top_diff, rois, bottom_diff,
           np.float32(spatial_scale), int(group_size))
