"""Dropout (Caffe's DropoutLayer).

With ratio r and scale s = 1 / (1 - r):

    TRAIN:  mask ~ Bernoulli(1 - r) per element (from backend.rng());  y = x * mask * s
            dx = dy * mask * s
    TEST:   y = x;  dx = dy

With ``scale_train`` false (a field of some Caffe forks; default true) the scaling moves to
test time: TRAIN y = x * mask and TEST y = x * (1 - r). In-place use is safe.

GPU: the mask is made on the device, never stored. Each TRAIN forward draws one uint64 seed
from backend.rng() on the host; element i is kept when u_i >= r, where u_i is a uniform on
multiples of 2^-24 in [0, 1) from the Philox-4x32-10 counter-based generator (Salmon et al.,
SC 2011; cuRAND's Philox) with key = the seed and counter = i. The backward hashes the same
(seed, i) again, so it uses the forward's mask without a mask buffer. The masks are not the
CPU's (a different generator), but are repeatable under the same random seed.
"""
import numpy as np
from numba import cuda

from pycaffe_cli import backend
from pycaffe_cli.cuda import math as gpu_math
from pycaffe_cli.cuda import memory
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import NeuronLayer, register
from pycaffe_cli.proto import caffe_pb2

# Philox-4x32 multipliers and Weyl key increments (Random123)
PHILOX_M0 = np.uint64(0xD2511F53)
PHILOX_M1 = np.uint64(0xCD9E8D57)
PHILOX_W0 = np.uint64(0x9E3779B9)
PHILOX_W1 = np.uint64(0xBB67AE85)
PHILOX_ROUNDS = 10
LOW32 = np.uint64(0xFFFFFFFF)
SHIFT32 = np.uint64(32)
SHIFT8 = np.uint64(8)
UNIT24 = np.float32(2.0 ** -24)


@register("Dropout", v1="DROPOUT")
class DropoutLayer(NeuronLayer):
    """Zero each element with probability ``dropout_ratio`` while training."""

    def layer_setup(self, bottom, top):
        p = self.param.dropout_param
        self.ratio = float(np.float32(p.dropout_ratio))
        if not 0.0 <= self.ratio < 1.0:
            raise self.error(f"dropout_ratio must be in [0, 1), got {p.dropout_ratio:g}")
        self.scale = np.float32(1.0 / (1.0 - self.ratio))
        fields = caffe_pb2.DropoutParameter.DESCRIPTOR.fields_by_name
        self.scale_train = p.scale_train if "scale_train" in fields else True

    def _train_scale(self):
        return self.scale if self.scale_train else np.float32(1)

    def forward_cpu(self, bottom, top):
        if self.phase == caffe_pb2.TRAIN:
            keep = backend.rng().random(bottom[0].shape, dtype=np.float32) >= self.ratio
            self.mask = keep.astype(np.float32) * self._train_scale()
            np.multiply(bottom[0].data, self.mask, out=top[0].data)
        elif self.scale_train:
            top[0].data[...] = bottom[0].data
        else:
            np.multiply(bottom[0].data, np.float32(1.0 - self.ratio), out=top[0].data)

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        if self.phase == caffe_pb2.TRAIN:
            np.multiply(top[0].diff, self.mask, out=bottom[0].diff)
        elif self.scale_train:
            bottom[0].diff[...] = top[0].diff
        else:
            np.multiply(top[0].diff, np.float32(1.0 - self.ratio), out=bottom[0].diff)

    def forward_gpu(self, bottom, top):
        x = bottom[0].gpu_data
        if self.phase == caffe_pb2.TRAIN:
            self._gpu_seed = backend.rng().integers(0, 2 ** 64, dtype=np.uint64)
            self._apply_mask_gpu(x, top[0].mutable_gpu_data)
        elif self.scale_train:
            if top[0] is not bottom[0]:
                memory.copy(x, top[0].mutable_gpu_data)
        else:
            gpu_math.axpby(x.size, np.float32(1.0 - self.ratio), x, 0.0, top[0].mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dy = top[0].gpu_diff
        if self.phase == caffe_pb2.TRAIN:
            self._apply_mask_gpu(dy, bottom[0].mutable_gpu_diff)
        elif self.scale_train:
            if top[0] is not bottom[0]:
                memory.copy(dy, bottom[0].mutable_gpu_diff)
        else:
            gpu_math.axpby(dy.size, np.float32(1.0 - self.ratio), dy, 0.0, bottom[0].mutable_gpu_diff)

    def _apply_mask_gpu(self, source, destination):
        """destination = source * mask * train scale, the mask of the last forward's seed."""
        launch(_dropout_kernel, source.size, source, destination, self._gpu_seed,
               np.float32(self.ratio), self._train_scale())


# --- GPU ------------------------------------------------------------------------------------
@cuda.jit(device=True)
def _philox_uniform(seed, counter):
    """A uniform float32 on multiples of 2^-24 in [0, 1): the first word of Philox-4x32-10
    with key ``seed`` and counter (``counter``, 0), both uint64. Products of 32-bit words
    are taken in uint64, so nothing overflows (mulhilo as high and low halves)."""
    c0 = counter & LOW32
    c1 = counter >> SHIFT32
    c2 = np.uint64(0)
    c3 = np.uint64(0)
    k0 = seed & LOW32
    k1 = seed >> SHIFT32
    for _ in range(PHILOX_ROUNDS):
        p0 = PHILOX_M0 * c0
        p1 = PHILOX_M1 * c2
        c0, c1, c2, c3 = ((p1 >> SHIFT32) ^ c1 ^ k0, p1 & LOW32,
                          (p0 >> SHIFT32) ^ c3 ^ k1, p0 & LOW32)
        k0 = (k0 + PHILOX_W0) & LOW32
        k1 = (k1 + PHILOX_W1) & LOW32
    return np.float32(c0 >> SHIFT8) * UNIT24


@cuda.jit(cache=True)
def _dropout_kernel(n, x, y, seed, ratio, scale):
    """y = x * scale where element i is kept (u(seed, i) >= ratio), x * 0 elsewhere: the
    forward on data, the backward on diffs (``x`` may be ``y``)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        keep = _philox_uniform(seed, np.uint64(index)) >= ratio
        y[index] = x[index] * (scale if keep else np.float32(0))
