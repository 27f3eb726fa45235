"""BatchNorm: normalise each channel to zero mean, unit variance (Caffe's BatchNormLayer).

The bottom is viewed as (N, C, S) (S = product of the axes after the channel axis; a 1-axis
bottom is one channel). Means and variances are taken over N and S per channel:

    forward:   y = (x - mu) / sqrt(var + eps)
    backward:  dx = (dy - mean(dy) - mean(dy * y) * y) / sqrt(var + eps)   (batch statistics)
               dx = dy / sqrt(var + eps)                                  (global statistics)

Three stat blobs hold running sums exactly as Caffe stores them: blobs[0] the mean sum (C,),
blobs[1] the variance sum (C,), blobs[2] the scale factor (1,). With ``use_global_stats`` the
layer uses mu = blobs[0] / sf and var = blobs[1] / sf (sf = blobs[2], 0 when sf is 0).
Otherwise it uses the batch statistics and updates the sums after each forward:

    sf   <- maf * sf + 1
    mean <- maf * mean + mu
    var  <- maf * var + m / (m - 1) * var_batch        (m = N * S; factor 1 when m = 1)

The stat blobs are no learnable parameters: they get lr_mult 0 and no gradient.

On the CPU each of these is one numba kernel: batch statistics in kernels/cpu/batch_stats.py
(a channel per job, numpy's summation order), stored ones in kernels/cpu/channel_affine.py;
the normalised values of a batch are kept in a buffer reused from pass to pass.

GPU mode runs wholly on the device: per-channel statistics by the kernels of
``kernels/cuda/channel_stats.py`` (one block per channel, fixed order), the running-sum update
and the global statistics by the per-channel kernels below.
"""
import math

import numpy as np
from numba import cuda

from pycaffe_cli.blob import Blob, read_only
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.kernels.cpu import batch_stats, channel_affine
from pycaffe_cli.layers.kernels.cpu.layout import NO_BIAS
from pycaffe_cli.layers.kernels.cuda import channel_stats
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.sizes import grow


@register("BatchNorm")
class BatchNormLayer(Layer):
    """batch_norm_param: use_global_stats (unset: TEST phase), moving_average_fraction, eps."""

    exact_num_bottom = 1
    exact_num_top = 1
    in_place_ok = True

    def layer_setup(self, bottom, top):
        p = self.param.batch_norm_param
        self.moving_average_fraction = np.float32(p.moving_average_fraction)
        self.use_global_stats = (p.use_global_stats if p.HasField("use_global_stats")
                                 else self.phase == caffe_pb2.TEST)
        self.eps = np.float32(p.eps)
        self.channels = 1 if bottom[0].num_axes == 1 else bottom[0].shape[1]
        if self.blobs:
            self._check_given_blobs()
        else:
            self.blobs = [Blob((self.channels,)), Blob((self.channels,)), Blob((1,))]
        self._mask_statistics()
        self.param_propagate_down = [False] * len(self.blobs)
        self._x_norm = np.empty(0, np.float32)  # kept for backward, grown as needed
        self._std = None
        self._gpu_x_norm = Blob()  # the device path's caches and per-channel buffers
        self._gpu_stats = Blob()

    def _check_given_blobs(self):
        wanted = [(self.channels,), (self.channels,), (1,)]
        got = [blob.count() for blob in self.blobs]
        if got != [int(np.prod(w)) for w in wanted]:
            raise self.error(f"the layer's given blobs have shapes "
                             f"{[b.shape for b in self.blobs]}, but {self.channels} "
                             f"channel(s) need {wanted} (mean, variance, scale factor)")

    def _mask_statistics(self):
        """Give every stat blob lr_mult 0, as Caffe does, so solvers never change them."""
        specs = self.param.param
        for i in range(len(self.blobs)):
            if i == len(specs):
                specs.add().lr_mult = 0.0
            elif specs[i].lr_mult != 0:
                raise self.error("Cannot configure batch normalization statistics as layer "
                                 f"parameters (param {i} has lr_mult {specs[i].lr_mult:g}; "
                                 "it must be 0)")

    def reshape(self, bottom, top):
        channels = 1 if bottom[0].num_axes == 1 else bottom[0].shape[1]
        if channels != self.channels:
            raise self.error(f"the bottom {bottom[0].shape_string()} has {channels} "
                             f"channel(s), the layer was set up for {self.channels}")
        top[0].reshape_like(bottom[0])
        self._gpu_x_norm.reshape_like(bottom[0])
        self._gpu_stats.reshape((3, self.channels))  # mean, var, std

    # --- forward ---------------------------------------------------------------------
    def forward_cpu(self, bottom, top):
        if bottom[0].count() == 0:  # an empty batch (after a Filter, say): nothing to do
            return
        if self.use_global_stats:
            self._forward_global_cpu(bottom, top)
            return
        num, channels, inner = self._view_shape(bottom[0])
        self._x_norm = grow(self._x_norm, bottom[0].count(), "BatchNorm's normalised values")
        mean, var, std = np.empty((3, channels), np.float32)
        batch_stats.forward(bottom[0].cpu_data.reshape(-1), num, channels, inner, self.eps,
                            top[0].flat_data, self._x_norm, mean, var, std)
        self._update_running_sums(mean, var, num * inner)
        # x_norm is kept for backward: an in-place layer after this one may overwrite the top.
        self._std = std

    def _forward_global_cpu(self, bottom, top):
        """(x - mean) / std in one pass (kernels/cpu/channel_affine.py); backward then needs
        only std."""
        mean, var = self._global_statistics()
        std = np.sqrt(var + self.eps)
        _, channels, inner = self._view_shape(bottom[0])
        channel_affine.normalize(bottom[0].cpu_data.reshape(-1), read_only(mean), read_only(std),
                                 top[0].flat_data, channels, inner)
        self._std = std

    def _global_statistics(self):
        factor = self.blobs[2].flat_data[0]
        scale = np.float32(0.0) if factor == 0 else np.float32(1.0) / factor
        return scale * self.blobs[0].flat_data, scale * self.blobs[1].flat_data

    def _update_running_sums(self, mean, var, m):
        maf = self.moving_average_fraction
        self.blobs[2].flat_data[0] = self.blobs[2].flat_data[0] * maf + np.float32(1.0)
        mean_sum = self.blobs[0].flat_data
        mean_sum *= maf
        mean_sum += mean
        correction = np.float32(m / (m - 1)) if m > 1 else np.float32(1.0)
        var_sum = self.blobs[1].flat_data
        var_sum *= maf
        var_sum += correction * var

    # --- backward --------------------------------------------------------------------
    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0] or bottom[0].count() == 0:
            return
        num, channels, inner = self._view_shape(top[0])
        dy, dx = top[0].cpu_diff.reshape(-1), bottom[0].flat_diff
        if self.use_global_stats:
            channel_affine.forward(dy, read_only(np.float32(1.0) / self._std), NO_BIAS, False, dx,
                                   np.float32(0.0), False, channels, inner)
        else:
            batch_stats.backward(dy, self._x_norm, self._std, num, channels, inner, dx)

    def _view_shape(self, blob):
        """(num, channels, inner) of the (N, C, S) view of a non-empty ``blob``."""
        num = blob.shape[0]
        return num, self.channels, blob.count() // (num * self.channels)

    # --- GPU -------------------------------------------------------------------------
    def _gpu_buffers(self):
        """Flat device views (mean, var, std) of ``channels`` values each."""
        stats, c = self._gpu_stats.mutable_gpu_data, self.channels
        return stats[:c], stats[c:2 * c], stats[2 * c:]

    def forward_gpu(self, bottom, top):
        if bottom[0].count() == 0:
            return
        num, channels, inner = self._view_shape(bottom[0])
        x = bottom[0].gpu_data
        mean, var, std = self._gpu_buffers()
        if self.use_global_stats:
            launch(_global_stats_kernel, channels, self.blobs[0].gpu_data,
                   self.blobs[1].gpu_data, self.blobs[2].gpu_data,
                   self.eps, mean, std)
        else:
            channel_stats.moments(x, num, channels, inner, mean, var)
            m = num * inner
            correction = np.float32(m / (m - 1)) if m > 1 else np.float32(1.0)
            launch(_running_sums_kernel, channels, mean, var, self.moving_average_fraction,
                   correction, self.eps, self.blobs[0].mutable_gpu_data,
                   self.blobs[1].mutable_gpu_data, self.blobs[2].mutable_gpu_data, std)
        channel_stats.normalize(x, channels, inner, mean, std, top[0].mutable_gpu_data,
                                self._gpu_x_norm.mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0] or bottom[0].count() == 0:
            return
        num, channels, inner = self._view_shape(bottom[0])
        dy = top[0].gpu_diff
        # mean(dy) and mean(dy * y) reuse the mean and var buffers (forward is done with them)
        mean_dy, mean_dy_y, std = self._gpu_buffers()
        if self.use_global_stats:
            channel_stats.normalize_backward(channel_stats.SCALE, dy, channels, inner, std,
                                             bottom[0].mutable_gpu_diff)
            return
        y = self._gpu_x_norm.gpu_data
        channel_stats.dot_means(dy, y, num, channels, inner, mean_dy, mean_dy_y)
        channel_stats.normalize_backward(channel_stats.FULL, dy, channels, inner, std,
                                         bottom[0].mutable_gpu_diff, y, mean_dy, mean_dy_y)


@cuda.jit(cache=True)
def _global_stats_kernel(channels, mean_sum, var_sum, factor, eps, mean, std):
    """mean = mean_sum / sf, std = sqrt(var_sum / sf + eps) (0 statistics when sf is 0)."""
    for c in range(cuda.grid(1), channels, cuda.gridsize(1)):
        sf = factor[0]
        scale = np.float32(0.0) if sf == 0 else np.float32(1.0) / sf
        mean[c] = scale * mean_sum[c]
        std[c] = math.sqrt(scale * var_sum[c] + eps)


@cuda.jit(cache=True)
def _running_sums_kernel(channels, mean, var, maf, correction, eps, mean_sum, var_sum,
                         factor, std):
    """Caffe's moving-average update of the stat blobs, and std = sqrt(var + eps)."""
    for c in range(cuda.grid(1), channels, cuda.gridsize(1)):
        if c == 0:
            factor[0] = factor[0] * maf + np.float32(1.0)
        mean_sum[c] = mean_sum[c] * maf + mean[c]
        var_sum[c] = var_sum[c] * maf + correction * var[c]
        std[c] = math.sqrt(var[c] + eps)
