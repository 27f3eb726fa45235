"""Pooling: max, average or stochastic pooling over 2-d windows (Caffe's PoolingLayer).

For input (N, C, H, W) the output is (N, C, PH, PW) with PH = ceil((H + 2 pad_h - kernel_h)
/ stride_h) + 1, one less if the last window would start in the padding (round_mode FLOOR:
floor instead of ceil). Per window:

    MAX:         y = max x;  dx = dy at the (first) argmax
    AVE:         y = sum x / pool_size  (pool_size: the window clipped to the padded image)
    STOCHASTIC:  TRAIN: y = x_i with i drawn with probability x_i / sum x (x >= 0);
                        dx_i = dy for the drawn i
                 TEST:  y = sum x^2 / sum x

A second top (MAX only) receives the argmax as a float index h * W + w within the plane.
Padding is for MAX and AVE only; global_pooling makes the window the whole input.

On the GPU the same kernels run from layers/kernels/cuda/pooling.py (same names and
signatures, gathering backward passes); stochastic TRAIN pooling draws its uniforms with
``backend.rng()`` on the host, as the CPU path does, and copies them over (so both modes
sample the same positions under one seed).
"""
import numpy as np

from pycaffe_cli import backend
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.inference_hooks import InferenceHooks
from pycaffe_cli.layers.kernels import geometry
from pycaffe_cli.layers.kernels.cpu import pooling as kernels
from pycaffe_cli.proto import caffe_pb2

MAX = caffe_pb2.PoolingParameter.MAX
AVE = caffe_pb2.PoolingParameter.AVE
STOCHASTIC = caffe_pb2.PoolingParameter.STOCHASTIC
FLOOR = caffe_pb2.PoolingParameter.FLOOR


def pooled_size(size, kernel, pad, stride, round_mode):
    """Output extent along one axis for Caffe's CEIL (default) or FLOOR round mode."""
    if round_mode == FLOOR:
        # floor((size + 2 pad - kernel) / stride) + 1 is the convolution rule; with pad <
        # kernel the last window always starts inside the image, so no clamp is needed.
        return geometry.conv_out_size(size, kernel, pad, stride, 1)
    return geometry.pool_out_size(size, kernel, pad, stride)


class PoolingInferenceHooks(InferenceHooks):
    """MAX pooling's forward-only pass, on the CPU, computes no argmax mask (only backward
    reads it), unless the mask is a top of its own."""

    def forward_pass(self):
        layer = self.layer
        if layer.method == MAX and not layer._mask_is_a_top and not layer._use_gpu("forward"):
            return layer._max_values_cpu
        return layer.forward_pass()


@register("Pooling", v1="POOLING")
class PoolingLayer(Layer):
    """pooling_param: pool, kernel_size | kernel_h + kernel_w, pad (_h/_w), stride (_h/_w),
    global_pooling, round_mode, engine (any engine runs this implementation)."""

    exact_num_bottom = 1
    min_num_top = 1
    max_num_top = 2
    inference_hooks = PoolingInferenceHooks

    def layer_setup(self, bottom, top):
        param = self.param.pooling_param
        self.method = param.pool
        if len(top) > 1 and self.method != MAX:
            raise self.error(f"only MAX pooling has a second (mask) top; "
                             f"{caffe_pb2.PoolingParameter.PoolMethod.Name(self.method)} "
                             f"pooling takes exactly 1 top blob, got {len(top)}")
        has_pad = param.pad or param.pad_h or param.pad_w
        if has_pad and self.method == STOCHASTIC:
            raise self.error("padding is implemented only for average and max pooling")
        self._mask = None
        self._rand = None
        self._mask_is_a_top = len(top) > 1

    def reshape(self, bottom, top):
        source = bottom[0]
        if source.num_axes != 4:
            raise self.error(f"input must have 4 axes, corresponding to (num, channels, "
                             f"height, width); got {source.shape_string()}")
        if top[0] is source:
            raise self.error("Pooling layer does not allow in-place computation")
        num, channels, height, width = source.shape
        param = self.param.pooling_param
        kernel, pad, stride = geometry.pool_geometry(param, height, width, self.name)
        self.kernel, self.pad, self.stride = kernel, pad, stride
        out = tuple(pooled_size(s, k, p, st, param.round_mode)
                    for s, k, p, st in zip((height, width), kernel, pad, stride))
        top_shape = (num, channels) + out
        top[0].reshape(top_shape)
        if len(top) > 1:
            top[1].reshape(top_shape)
        if self.method == MAX and len(top) == 1:
            self._mask = _buffer(self._mask, top_shape, np.int32)
        if self.method == STOCHASTIC:
            dtype = np.int32 if self.phase == caffe_pb2.TRAIN else np.float32
            self._rand = _buffer(self._rand, top_shape, dtype)

    # --- forward / backward ------------------------------------------------------------
    def forward_cpu(self, bottom, top):
        x = _planes(bottom[0].data)
        y = _planes(top[0].data)
        if self.method == MAX:
            mask = _planes(top[1].data) if len(top) > 1 else _planes(self._mask)
            kernels.max_pool_forward(x, y, mask, *self._window())
        elif self.method == AVE:
            kernels.ave_pool_forward(x, y, *self._window())
        elif self.phase == caffe_pb2.TRAIN:
            # Caffe draws from (0, 1]; numpy's random() gives [0, 1).
            uniform = np.float32(1.0) - backend.rng().random(y.shape, dtype=np.float32)
            kernels.sto_pool_forward_train(x, uniform, y, _planes(self._rand),
                                           *self._window(padded=False))
        else:
            kernels.sto_pool_forward_test(x, y, _planes(self._rand),
                                          *self._window(padded=False))

    def _max_values_cpu(self, bottom, top):
        """MAX pooling's top without the mask (PoolingInferenceHooks)."""
        kernels.max_pool_forward_values(_planes(bottom[0].data), _planes(top[0].data),
                                        *self._window())

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dy = _planes(top[0].diff)
        dx = _planes(bottom[0].diff)
        if self.method == MAX:
            mask = _planes(top[1].data) if len(top) > 1 else _planes(self._mask)
            kernels.max_pool_backward(dy, mask, dx, *self._window())
        elif self.method == AVE:
            kernels.ave_pool_backward(dy, dx, *self._window())
        elif self.phase == caffe_pb2.TRAIN:
            kernels.sto_pool_backward(dy, _planes(self._rand), dx, *self._window(padded=False))
        else:
            kernels.sto_pool_backward_test(_planes(bottom[0].data), _planes(top[0].data),
                                           _planes(self._rand), dy, dx,
                                           *self._window(padded=False))

    def forward_gpu(self, bottom, top):
        from pycaffe_cli.layers.kernels.cuda import pooling as gpu
        x = _planes(bottom[0].gpu_data, bottom[0].shape)
        y = _planes(top[0].mutable_gpu_data, top[0].shape)
        if self.method == MAX:
            mask = _planes(top[1].mutable_gpu_data, top[1].shape) if len(top) > 1 else \
                self._device_buffer("_gpu_mask", top[0].shape, np.int32)
            gpu.max_pool_forward(x, y, mask, *self._window())
        elif self.method == AVE:
            gpu.ave_pool_forward(x, y, *self._window())
        elif self.phase == caffe_pb2.TRAIN:
            uniform = np.float32(1.0) - backend.rng().random(y.shape, dtype=np.float32)
            from numba import cuda
            gpu.sto_pool_forward_train(x, cuda.to_device(uniform), y,
                                       self._device_buffer("_gpu_rand", top[0].shape,
                                                           np.int32),
                                       *self._window(padded=False))
        else:
            gpu.sto_pool_forward_test(x, y, self._device_buffer("_gpu_rand", top[0].shape,
                                                                np.float32),
                                      *self._window(padded=False))

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        from pycaffe_cli.layers.kernels.cuda import pooling as gpu
        dy = _planes(top[0].gpu_diff, top[0].shape)
        dx = _planes(bottom[0].mutable_gpu_diff, bottom[0].shape)
        if self.method == MAX:
            mask = _planes(top[1].gpu_data, top[1].shape) if len(top) > 1 \
                else self._gpu_mask
            gpu.max_pool_backward(dy, mask, dx, *self._window())
        elif self.method == AVE:
            gpu.ave_pool_backward(dy, dx, *self._window())
        elif self.phase == caffe_pb2.TRAIN:
            gpu.sto_pool_backward(dy, self._gpu_rand, dx, *self._window(padded=False))
        else:
            gpu.sto_pool_backward_test(_planes(bottom[0].gpu_data,
                                               bottom[0].shape),
                                       _planes(top[0].gpu_data, top[0].shape),
                                       self._gpu_rand, dy, dx, *self._window(padded=False))

    def _device_buffer(self, name, shape, dtype):
        """A device array of ``shape`` planes kept on the layer as ``name`` (made again only
        when the shape or type changes)."""
        num, channels, height, width = shape
        shape = (num * channels, height, width)
        current = getattr(self, name, None)
        if current is None or current.shape != shape or current.dtype != dtype:
            from numba import cuda
            current = cuda.device_array(shape, dtype)
            setattr(self, name, current)
        return current

    def _window(self, padded=True):
        """Kernel arguments: kernel_h, kernel_w, stride_h, stride_w[, pad_h, pad_w]."""
        window = (*self.kernel, *self.stride)
        return window + tuple(self.pad) if padded else window


def _planes(array, shape=None):
    """(N, C, H, W) -> (N*C, H, W) view; ``shape`` gives (N, C, H, W) for a flat (device)
    array."""
    num, channels, height, width = array.shape if shape is None else shape
    return array.reshape(num * channels, height, width)


def _buffer(current, shape, dtype):
    if current is None or current.shape != shape or current.dtype != dtype:
        return np.zeros(shape, dtype)
    return current
