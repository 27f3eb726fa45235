"""LRN: local response normalisation (Caffe's LRNLayer).

With n = local_size (odd) and input (N, C, H, W):

    ACROSS_CHANNELS:  y = x * (k + alpha / n * sum_{n channels around c} x^2)^-beta
    WITHIN_CHANNEL:   y = x * (1 + alpha / n^2 * sum_{n x n pixels around (h, w)} x^2)^-beta
                      (zero padding; k is not used, as in Caffe)

Backward is the exact derivative, computed as Caffe does (see kernels/cpu/lrn.py).
Both regions also run on the GPU (kernels/cuda/lrn.py).
"""
import numpy as np

from pycaffe_cli.blob import Blob
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.kernels.cpu import lrn as kernels
from pycaffe_cli.proto import caffe_pb2

ACROSS_CHANNELS = caffe_pb2.LRNParameter.ACROSS_CHANNELS


@register("LRN", v1="LRN")
class LRNLayer(Layer):
    """lrn_param: local_size (default 5, odd), alpha (1), beta (0.75), k (1),
    norm_region (ACROSS_CHANNELS), engine (any engine runs this implementation)."""

    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        param = self.param.lrn_param
        self.size = int(param.local_size)
        if self.size % 2 != 1:
            raise self.error(f"LRN only supports odd values for local_size, got {self.size}")
        self.alpha = np.float32(param.alpha)
        self.beta = np.float32(param.beta)
        self.k = np.float32(param.k)
        self.region = param.norm_region
        self._buffers = None

    def reshape(self, bottom, top):
        source = bottom[0]
        if source.num_axes != 4:
            raise self.error(f"input must have 4 axes, corresponding to (num, channels, "
                             f"height, width); got {source.shape_string()}")
        if top[0] is source:
            raise self.error("LRN layer does not allow in-place computation")
        top[0].reshape_like(source)
        # ACROSS: the scale; WITHIN: the pooled squares and the power term.
        count = 1 if self.region == ACROSS_CHANNELS else 2
        if self._buffers is None or self._buffers[0].shape != source.shape:
            self._buffers = [np.zeros(source.shape, np.float32) for _ in range(count)]

    def forward_cpu(self, bottom, top):
        if self.region == ACROSS_CHANNELS:
            kernels.lrn_across_forward(_channels(bottom[0].data), _channels(self._buffers[0]),
                                       _channels(top[0].data), self.size,
                                       np.float32(self.alpha / np.float32(self.size)),
                                       self.k, self.beta)
        else:
            kernels.lrn_within_forward(_planes(bottom[0].data), _planes(top[0].data),
                                       _planes(self._buffers[0]), _planes(self._buffers[1]),
                                       self.size, self.alpha, self.beta)

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        if self.region == ACROSS_CHANNELS:
            # Caffe computes 2 * alpha * beta / size in double, then stores it as float.
            cache_ratio = np.float32(2.0 * float(self.alpha) * float(self.beta) / self.size)
            kernels.lrn_across_backward(_channels(bottom[0].data), _channels(top[0].data),
                                        _channels(self._buffers[0]), _channels(top[0].diff),
                                        _channels(bottom[0].diff), self.size, self.beta,
                                        cache_ratio)
        else:
            kernels.lrn_within_backward(_planes(bottom[0].data), _planes(self._buffers[0]),
                                        _planes(self._buffers[1]), _planes(top[0].diff),
                                        _planes(bottom[0].diff), self.size, self.alpha,
                                        self.beta)


    def forward_gpu(self, bottom, top):
        from pycaffe_cli.layers.kernels.cuda import lrn as gpu
        shape = bottom[0].shape
        if self.region != ACROSS_CHANNELS:
            pooled, power, scratch = self._gpu_buffers(shape, 3)
            gpu.lrn_within_forward(_planes(bottom[0].gpu_data, shape),
                                   _planes(top[0].mutable_gpu_data, shape), _planes(pooled, shape),
                                   _planes(power, shape), _planes(scratch, shape), self.size,
                                   self.alpha, self.beta)
            return
        scale, = self._gpu_buffers(shape, 1)
        gpu.lrn_across_forward(_channels(bottom[0].gpu_data, shape),
                               _channels(scale, shape), _channels(top[0].mutable_gpu_data, shape),
                               self.size, np.float32(self.alpha / np.float32(self.size)),
                               self.k, self.beta)

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        from pycaffe_cli.layers.kernels.cuda import lrn as gpu
        shape = bottom[0].shape
        x = bottom[0].gpu_data
        dy = top[0].gpu_diff
        if self.region != ACROSS_CHANNELS:
            pooled, power, scratch = (b.mutable_gpu_data for b in self._gpu_blobs)
            gpu.lrn_within_backward(_planes(x, shape), _planes(pooled, shape),
                                    _planes(power, shape), _planes(dy, shape),
                                    _planes(bottom[0].mutable_gpu_diff, shape), _planes(scratch, shape),
                                    self.size, self.alpha, self.beta)
            return
        cache_ratio = np.float32(2.0 * float(self.alpha) * float(self.beta) / self.size)
        gpu.lrn_across_backward(_channels(x, shape),
                                _channels(top[0].gpu_data, shape),
                                _channels(self._gpu_blobs[0].gpu_data, shape),
                                _channels(dy, shape), _channels(bottom[0].mutable_gpu_diff, shape),
                                self.size, self.beta, cache_ratio)

    def _gpu_buffers(self, shape, count):
        """``count`` flat device buffers of the bottom's size, kept for the backward pass."""
        if getattr(self, "_gpu_blobs", None) is None or len(self._gpu_blobs) != count:
            self._gpu_blobs = [Blob((0,)) for _ in range(count)]
        for blob in self._gpu_blobs:
            blob.reshape(shape)
        return [blob.mutable_gpu_data for blob in self._gpu_blobs]


def _channels(array, shape=None):
    """(N, C, H, W) -> (N, C, H*W) view; ``shape`` gives (N, C, H, W) for a flat (device)
    array."""
    num, channels, height, width = array.shape if shape is None else shape
    return array.reshape(num, channels, height * width)


def _planes(array, shape=None):
    """(N, C, H, W) -> (N*C, H, W) view; ``shape`` gives (N, C, H, W) for a flat (device)
    array."""
    num, channels, height, width = array.shape if shape is None else shape
    return array.reshape(num * channels, height, width)
