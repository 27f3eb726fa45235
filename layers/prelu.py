"""PReLU: ReLU with a learned negative slope per channel (Caffe's PReLULayer; He et al. 2015).

For a bottom of shape (N, C, ...) with slopes a (shape (C,), or a single slope of shape ()
when ``channel_shared``, as Caffe stores it):

    forward:   y = max(x, 0) + a_c * min(x, 0)
    backward:  da_c += sum over n, spatial of dy * x * [x <= 0]
               dx    = dy * ([x > 0] + a_c * [x <= 0])

Backward needs the bottom data, so in place the layer keeps a copy of the input (as Caffe's
``bottom_memory_``) and computes the slope gradient before overwriting the shared diff.

GPU: the blob is viewed flat as (N, C, inner), element i in channel (i // inner) % C (always
0 when channel_shared: C counts as 1). Forward and bottom gradient are element-wise kernels.
The slope gradient gathers, with no atomics: ``_slope_partials_kernel`` gives each channel
``parts`` blocks, whose threads add their share of the channel's dy * x * [x <= 0] terms
(float32 products, as the CPU's) in float64 and fold them in shared memory into one float64
partial per block; ``_slope_diff_kernel`` then adds each channel's partials, in float64, and
accumulates the float32 sum into the slope diff. The launch sizes depend only on the shape,
so the sums repeat run to run; they differ from the CPU's float64 sums only in order.
"""
import numpy as np
from numba import cuda

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda import launch as launching
from pycaffe_cli.cuda import memory
from pycaffe_cli.cuda.elementwise import DeviceCopy
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.fillers import fill
from pycaffe_cli.layers.base import NeuronLayer, register
from pycaffe_cli.proto import caffe_pb2

DEFAULT_SLOPE = 0.25
REDUCE_THREADS = 256  # shared-memory size of the block fold; a power of two
MIN_TERMS_PER_THREAD = 4  # a channel gets more blocks only while each thread has this many


@register("PReLU")
class PReLULayer(NeuronLayer):
    """y = max(x, 0) + a_c min(x, 0) with learnable a."""

    saved_input = None

    def layer_setup(self, bottom, top):
        p = self.param.prelu_param
        self._check_axes(bottom[0])
        self.channel_shared = p.channel_shared
        channels = bottom[0].shape[1]
        if not self.blobs:
            self.blobs = [Blob(() if self.channel_shared else (channels,))]
            self._fill_slopes(p)
        wanted = 1 if self.channel_shared else channels
        if self.blobs[0].count() != wanted:
            raise self.error(f"Negative slope size is inconsistent with prototxt config: the "
                             f"slope blob has {self.blobs[0].count()} value(s), "
                             + ("channel_shared needs 1" if self.channel_shared else
                                f"the bottom {bottom[0].shape_string()} has {channels} "
                                "channels"))
        self.param_propagate_down = [True] * len(self.blobs)
        self._gpu_input = DeviceCopy()
        self._gpu_partials = None

    def _fill_slopes(self, p):
        if p.HasField("filler"):
            filler = p.filler
        else:
            filler = caffe_pb2.FillerParameter(type="constant", value=DEFAULT_SLOPE)
        # fill a 1-axis twin: the fillers' fan computations need at least one axis
        twin = Blob((self.blobs[0].count(),))
        fill(twin, filler, self.name)
        self.blobs[0].flat_data[:] = twin.flat_data

    def _check_axes(self, blob):
        if blob.num_axes < 2:
            raise self.error(f"Number of axes of bottom blob must be >=2 (got "
                             f"{blob.shape_string()})")

    def reshape(self, bottom, top):
        self._check_axes(bottom[0])
        if not self.channel_shared and bottom[0].shape[1] != self.blobs[0].count():
            raise self.error(f"the bottom {bottom[0].shape_string()} has {bottom[0].shape[1]} "
                             f"channels, the slopes {self.blobs[0].count()}")
        super().reshape(bottom, top)

    def _slopes(self, ndim):
        """The slopes shaped to broadcast over (N, C, ...)."""
        a = self.blobs[0].flat_data
        if self.channel_shared:
            return a[0]
        return a.reshape((1, -1) + (1,) * (ndim - 2))

    def forward_cpu(self, bottom, top):
        x = bottom[0].data
        self.saved_input = x.copy() if top[0] is bottom[0] else None
        zero = np.float32(0)
        negative = self._slopes(x.ndim) * np.minimum(x, zero)
        np.add(np.maximum(x, zero), negative, out=top[0].data)

    def backward_cpu(self, top, propagate_down, bottom):
        x = self.saved_input if top[0] is bottom[0] else bottom[0].data
        dy = top[0].diff
        negative = x <= 0
        # the slope gradient first: in place, writing dx overwrites dy
        if self.param_propagate_down[0]:
            self._accumulate_slope_diff(dy * x * negative)
        if propagate_down[0]:
            slope = np.where(negative, self._slopes(x.ndim), np.float32(1))
            np.multiply(dy, slope, out=bottom[0].diff)

    def _accumulate_slope_diff(self, terms):
        if self.channel_shared:
            total = terms.sum(dtype=np.float64)
        else:
            axes = (0,) + tuple(range(2, terms.ndim))
            total = terms.sum(axis=axes, dtype=np.float64)
        diff = self.blobs[0].flat_diff
        diff += np.asarray(total, dtype=np.float32).reshape(-1)

    def _gpu_geometry(self, bottom):
        """(channels, inner) of the flat (N, C, inner) view; one channel when shared."""
        if self.channel_shared:
            return 1, bottom.count(1)
        return bottom.shape[1], bottom.count(2)

    def forward_gpu(self, bottom, top):
        x = self._gpu_input.keep_if(bottom[0].gpu_data, top[0] is bottom[0])
        channels, inner = self._gpu_geometry(bottom[0])
        launch(_prelu_forward_kernel, x.size, x, self.blobs[0].gpu_data,
               top[0].mutable_gpu_data, channels, inner)

    def backward_gpu(self, top, propagate_down, bottom):
        x = self._gpu_input.kept_or(bottom[0], top[0] is bottom[0])
        dy = top[0].gpu_diff
        channels, inner = self._gpu_geometry(bottom[0])
        # the slope gradient first: in place, writing dx overwrites dy
        if self.param_propagate_down[0] and x.size:
            self._accumulate_slope_diff_gpu(x, dy, channels, inner)
        if propagate_down[0]:
            launch(_prelu_backward_kernel, x.size, x, dy, self.blobs[0].gpu_data,
                   bottom[0].mutable_gpu_diff, channels, inner)

    def _accumulate_slope_diff_gpu(self, x, dy, channels, inner):
        per_channel = x.size // channels
        threads = min(REDUCE_THREADS, launching.THREADS_PER_BLOCK)
        threads = 1 << (threads.bit_length() - 1)  # a power of two
        parts = min(max(1, per_channel // (threads * MIN_TERMS_PER_THREAD)),
                    max(1, launching.MAX_BLOCKS // channels))
        tasks = channels * parts
        if self._gpu_partials is None or self._gpu_partials.size < tasks:
            self._gpu_partials = memory.empty(tasks, np.float64)
        blocks = min(tasks, launching.MAX_BLOCKS)
        _slope_partials_kernel[blocks, threads](x, dy, self._gpu_partials, channels, inner,
                                                parts)
        launch(_slope_diff_kernel, channels, self._gpu_partials, parts,
               self.blobs[0].mutable_gpu_diff)


# --- GPU ------------------------------------------------------------------------------------
@cuda.jit(cache=True)
def _prelu_forward_kernel(n, x, slopes, y, channels, inner):
    """y = x if x > 0 else a_c x (``x`` may be ``y``)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        value = x[index]
        if value > 0:
            y[index] = value
        else:
            y[index] = slopes[(index // inner) % channels] * value


@cuda.jit(cache=True)
def _prelu_backward_kernel(n, x, dy, slopes, dx, channels, inner):
    """dx = dy * (a_c if x <= 0 else 1) (``dy`` may be ``dx``)."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        if x[index] <= 0:
            dx[index] = dy[index] * slopes[(index // inner) % channels]
        else:
            dx[index] = dy[index]


@cuda.jit(cache=True)
def _slope_partials_kernel(x, dy, partials, channels, inner, parts):
    """partials[c * parts + p] = sum over block p's share of channel c of dy x [x <= 0]."""
    shared = cuda.shared.array(REDUCE_THREADS, np.float64)
    tid = cuda.threadIdx.x
    per_channel = x.size // channels
    stride = parts * cuda.blockDim.x
    for task in range(cuda.blockIdx.x, channels * parts, cuda.gridDim.x):
        c = task // parts
        total = 0.0
        for j in range(task % parts * cuda.blockDim.x + tid, per_channel, stride):
            index = ((j // inner) * channels + c) * inner + j % inner
            value = x[index]
            if value <= 0:
                total += np.float64(dy[index] * value)
        shared[tid] = total
        cuda.syncthreads()
        step = cuda.blockDim.x // 2
        while step > 0:
            if tid < step:
                shared[tid] += shared[tid + step]
            cuda.syncthreads()
            step //= 2
        if tid == 0:
            partials[task] = shared[0]
        cuda.syncthreads()  # shared[0] read before the next task's fold writes it


@cuda.jit(cache=True)
def _slope_diff_kernel(n, partials, parts, slope_diff):
    """slope_diff[c] += sum of channel c's ``parts`` partials (n = channels)."""
    for c in range(cuda.grid(1), n, cuda.gridsize(1)):
        total = 0.0
        for p in range(c * parts, (c + 1) * parts):
            total += partials[p]
        slope_diff[c] += np.float32(total)
