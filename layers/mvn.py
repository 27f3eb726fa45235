"""MVN: mean-variance normalisation of each instance (Caffe's MVNLayer).

The bottom is viewed as rows of ``dim`` values: one row per (num, channel) pair, or one per
num with ``across_channels``. Per row, with mu the mean and sigma = sqrt(mean((x - mu)^2)):

    forward:   y = x - mu                            (normalize_variance false)
               y = (x - mu) / (sigma + eps)          (normalize_variance true; eps after sqrt)
    backward:  dx = dy - mean(dy)                    (normalize_variance false)
               dx = (dy - mean(dy) - mean(dy * y) * y) / (sigma + eps)

The backward formula is Caffe's: it drops the factor (sigma + eps) / sigma of the exact
derivative of the last term, which is 1 up to eps.

GPU mode runs wholly on the device: the rows are the channels of a (1, rows, dim) view for the
per-channel kernels of ``kernels/cuda/channel_stats.py`` (one block per row, fixed order), and
sigma = sqrt(var) + eps comes from the per-row kernel below.
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.kernels.cuda import channel_stats


@register("MVN", v1="MVN")
class MVNLayer(Layer):
    """mvn_param: normalize_variance (default true), across_channels (false), eps (1e-9)."""

    exact_num_bottom = 1
    exact_num_top = 1
    in_place_ok = True

    def layer_setup(self, bottom, top):
        p = self.param.mvn_param
        self.normalize_variance = p.normalize_variance
        self.across_channels = p.across_channels
        self.eps = np.float32(p.eps)
        self._sigma = None
        self._gpu_stats = Blob()  # the device path's per-row buffers

    def reshape(self, bottom, top):
        source = bottom[0]
        self.rows = source.num if self.across_channels else source.num * source.channels
        top[0].reshape_like(source)
        self._gpu_stats.reshape((3, self.rows))  # mean (then mean(dy)), var, sigma

    def _rows(self, array):
        return array.reshape(self.rows, -1)

    def forward_cpu(self, bottom, top):
        x = self._rows(bottom[0].data)
        if x.size == 0:
            return
        centred = x - x.mean(axis=1, keepdims=True, dtype=np.float64).astype(np.float32)
        if self.normalize_variance:
            variance = np.square(centred).mean(axis=1, keepdims=True, dtype=np.float64)
            self._sigma = np.sqrt(variance).astype(np.float32) + self.eps
            centred /= self._sigma
        self._rows(top[0].data)[...] = centred

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0] or bottom[0].count() == 0:
            return
        dy = self._rows(top[0].diff)
        mean_dy = dy.mean(axis=1, keepdims=True, dtype=np.float64).astype(np.float32)
        if self.normalize_variance:
            y = self._rows(top[0].data)
            mean_dy_y = np.einsum("ij,ij->i", dy, y, dtype=np.float64)[:, None] / y.shape[1]
            dx = (dy - mean_dy - mean_dy_y.astype(np.float32) * y) / self._sigma
        else:
            dx = dy - mean_dy
        self._rows(bottom[0].diff)[...] = dx

    # --- GPU -------------------------------------------------------------------------
    def _gpu_buffers(self):
        """Flat device views of ``rows`` values each: mean, var, sigma."""
        stats, r = self._gpu_stats.mutable_gpu_data, self.rows
        return stats[:r], stats[r:2 * r], stats[2 * r:]

    def forward_gpu(self, bottom, top):
        count = bottom[0].count()
        if count == 0:
            return
        dim = count // self.rows
        x = bottom[0].gpu_data
        mean, var, sigma = self._gpu_buffers()
        channel_stats.moments(x, 1, self.rows, dim, mean, var)
        if self.normalize_variance:
            launch(_sigma_kernel, self.rows, var, self.eps, sigma)
        channel_stats.normalize(x, self.rows, dim, mean,
                                sigma if self.normalize_variance else None, top[0].mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        count = bottom[0].count()
        if not propagate_down[0] or count == 0:
            return
        dim = count // self.rows
        dy = top[0].gpu_diff
        mean_dy, mean_dy_y, sigma = self._gpu_buffers()  # forward's mean and var are spent
        if self.normalize_variance:
            y = top[0].gpu_data
            channel_stats.dot_means(dy, y, 1, self.rows, dim, mean_dy, mean_dy_y)
            channel_stats.normalize_backward(channel_stats.FULL, dy, self.rows, dim, sigma,
                                             bottom[0].mutable_gpu_diff, y, mean_dy, mean_dy_y)
        else:
            channel_stats.dot_means(dy, dy, 1, self.rows, dim, mean_dy)
            channel_stats.normalize_backward(channel_stats.CENTRE, dy, self.rows, dim, None,
                                             bottom[0].mutable_gpu_diff, mean_dy=mean_dy)


@cuda.jit(cache=True)
def _sigma_kernel(rows, var, eps, sigma):
    """sigma = sqrt(var) + eps (the CPU path roots the unrounded float64 variance: the same
    float32 sigma up to one rounding)."""
    for r in range(cuda.grid(1), rows, cuda.gridsize(1)):
        sigma[r] = math.sqrt(var[r]) + eps
