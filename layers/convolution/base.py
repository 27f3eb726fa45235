"""What Convolution and Deconvolution share (Caffe's BaseConvolutionLayer).

Both are GEMMs over column buffers. Caffe names the two sides of the convolution "input" and
"output": the input image is the one that gets unfolded by im2col (the bottom of a
Convolution, the top of a Deconvolution) and the output is the matrix side. With G groups,
weights W viewed as (G, conv_out_channels / G, kernel_dim) and col = im2col(input) as
(G, kernel_dim, num P) -- the whole batch in one buffer, so each product is ONE GEMM:

    forward_gemm:   output = W_g  @ im2col(input)                        (+ bias)
    backward_gemm:  input  = col2im(W_g^T @ output)
    weight_gemm:    dW_g  += output_g @ im2col(input)_g^T

Convolution runs them as forward / (weight, backward) and Deconvolution as backward /
(weight, forward). 1x1 windows with stride 1 and no pad need no im2col: the input itself is
the column matrix of each image, multiplied in place by batched GEMMs. Buffers are allocated
in ``reshape`` and reused; batches whose column buffer would exceed ``COL_BUFFER_LIMIT``
elements run in a few blocks of images (else a Convolution's weight gradient reuses the
columns its forward left). The GEMMs see the output side as (C_out, count P) while blobs hold
(count, C_out, P): the layout kernels reorder it, adding the bias on the way out (and, on the
CPU, summing the bias gradient on the way back in, to the bit what numpy's sums gave).

Layers whose groups make those GEMMs tiny (depthwise ones: one channel in and out per group),
and ungrouped convolutions with a tiny window (LeNet conv1: 1 x 5 x 5 -> 20), run the DIRECT
plan instead, chosen per layer at reshape by ``plan.choose_plan``: the three passes as window
sums on the blob layouts, no buffers, the whole batch in one block, through the backends'
``direct_*`` primitives (kernels/cpu/depthwise/, kernels/cuda/depthwise.py).

The plan is written once, here, over a backend object chosen by the mode: ``CpuConvBackend``
(numpy arrays) or ``GpuConvBackend`` (device arrays), see backend.py; the window's im2col and
col2im are columns.py's. The GPU backend covers 2-d windows (the CUDA im2col is 2-d); N-d ones
run the CPU backend, logged once. Subclasses write ``forward_with`` / ``backward_with`` over a
backend. ``ConvolutionInferenceHooks`` is what the inference plan may ask of the family: one
column buffer for all its layers, and a ReLU fused where forward adds the bias.
"""
import math

from pycaffe_cli import backend
from pycaffe_cli.blob import Blob
from pycaffe_cli.fillers import fill
from pycaffe_cli.layers.base import Layer
from pycaffe_cli.layers.convolution import plan as rules
from pycaffe_cli.layers.convolution.backend import CpuConvBackend, GemmDims, GpuConvBackend
from pycaffe_cli.layers.convolution.columns import ColumnGeometry
from pycaffe_cli.layers.convolution.plan import Plan
from pycaffe_cli.layers.inference_hooks import ReluFusingHooks
from pycaffe_cli.layers.kernels.geometry import conv_geometry
from pycaffe_cli.layers.views import layer_axis
from pycaffe_cli.synced_memory import data_stamps

COL_BUFFER_LIMIT = 1 << 25  # elements (128 MiB of float32) per column buffer


def _drop_leading_ones(shape):
    return tuple(shape)[next((i for i, size in enumerate(shape) if size != 1), len(shape)):]


class ConvolutionInferenceHooks(ReluFusingHooks):
    """The family's inference hooks (see InferenceHooks): the plan's convolutions share one
    column buffer, and a producer of a chain applies the chain's ReLU where it adds the bias
    (the CPU backend only)."""

    workspace_family = "convolution"

    def share_workspace(self, donor):
        """Use ``donor``'s backends, so its column and GEMM buffers."""
        layer = self.layer
        layer.cpu_backend = donor.cpu_backend
        if donor._gpu_backend is None:
            donor._gpu_backend = GpuConvBackend() if backend.mode() is backend.Mode.GPU else None
        layer._gpu_backend = donor._gpu_backend


class BaseConvolutionLayer(Layer):
    """Parameters, shapes and the three GEMMs of (de)convolution. Subclasses set
    ``reverse_dimensions`` and ``compute_output_shape`` and write ``forward_with`` /
    ``backward_with`` (the passes over one backend)."""

    min_num_bottom = 1
    min_num_top = 1
    equal_num_bottom_top = True
    reverse_dimensions = False
    inference_hooks = ConvolutionInferenceHooks

    def compute_output_shape(self, in_shape):
        raise NotImplementedError

    # --- set-up ------------------------------------------------------------------------
    def layer_setup(self, bottom, top):
        p = self.param.convolution_param
        self.channel_axis = layer_axis(self, bottom[0], p.axis)
        self.num_spatial_axes = bottom[0].num_axes - self.channel_axis - 1
        kernel, pad, stride, dilation = conv_geometry(p, self.num_spatial_axes, self.name)
        self.geometry = ColumnGeometry(kernel, pad, stride, dilation, p.force_nd_im2col)
        self.is_1x1 = all(k == 1 and s == 1 and q == 0 for k, s, q in zip(kernel, stride, pad))
        self.channels = bottom[0].shape[self.channel_axis]
        self.num_output = p.num_output
        self.group = p.group
        self._check_channels()
        if self.reverse_dimensions:
            self.conv_out_channels, self.conv_in_channels = self.channels, self.num_output
        else:
            self.conv_out_channels, self.conv_in_channels = self.num_output, self.channels
        self.bias_term = p.bias_term
        weight_shape = (self.conv_out_channels, self.conv_in_channels // self.group) + kernel
        if self.blobs:
            self._check_given_blobs(weight_shape)
        else:
            self.blobs = [Blob(weight_shape)]
            fill(self.blobs[0], p.weight_filler, self.name)
            if self.bias_term:
                self.blobs.append(Blob((self.num_output,)))
                fill(self.blobs[1], p.bias_filler, self.name)
        self.kernel_dim = math.prod(weight_shape[1:])
        self.param_propagate_down = [True] * len(self.blobs)
        self.cpu_backend = CpuConvBackend()
        self._gpu_backend = None
        # ReLU's negative slope to apply where forward adds the bias (None: no ReLU): the
        # inference plan's, on its own copies, CPU backend only (ConvolutionInferenceHooks).
        self._fused_relu_slope = None
        self.plan = Plan.GEMM

    def _check_channels(self):
        if self.num_output <= 0:
            raise self.error(f"convolution_param.num_output must be positive, got "
                             f"{self.num_output}")
        if self.group <= 0:
            raise self.error(f"convolution_param.group must be positive, got {self.group}")
        if self.channels % self.group:
            raise self.error(f"the input's {self.channels} channels are not divisible by "
                             f"group {self.group}")
        if self.num_output % self.group:
            raise self.error(f"Number of output should be multiples of group: num_output "
                             f"{self.num_output}, group {self.group}")

    def _check_given_blobs(self, weight_shape):
        wanted = [weight_shape] + ([(self.num_output,)] if self.bias_term else [])
        if len(self.blobs) != len(wanted):
            raise self.error(f"Incorrect number of weight blobs: expected {len(wanted)} "
                             f"(bias_term: {str(self.bias_term).lower()}), got "
                             f"{len(self.blobs)}")
        for blob, shape, what in zip(self.blobs, wanted, ("weight", "bias")):
            # Legacy 4-d blob shapes (1 1 1 N for a bias) are the same blob.
            if _drop_leading_ones(blob.shape) != _drop_leading_ones(shape):
                raise self.error(f"Incorrect {what} shape: expected shape "
                                 f"{Blob(shape).shape_string()}; instead, shape was "
                                 f"{blob.shape_string()}")
            blob.reshape(shape)

    # --- shapes ------------------------------------------------------------------------
    def reshape(self, bottom, top):
        first_spatial = self.channel_axis + 1
        shape = bottom[0].shape
        if len(shape) != first_spatial + self.num_spatial_axes:
            raise self.error(f"bottom num_axes may not change (was "
                             f"{first_spatial + self.num_spatial_axes}, now "
                             f"{bottom[0].shape_string()})")
        if shape[self.channel_axis] != self.channels:
            raise self.error(f"Input size incompatible with convolution kernel: the bottom "
                             f"{bottom[0].shape_string()} has {shape[self.channel_axis]} "
                             f"channels, the weights expect {self.channels}")
        for blob in bottom[1:]:
            if blob.shape != shape:
                raise self.error(f"All inputs must have the same shape: "
                                 f"{bottom[0].shape_string()} vs {blob.shape_string()}")
        self.num = bottom[0].count(0, self.channel_axis)
        in_shape = shape[first_spatial:]
        out_shape = self.compute_output_shape(in_shape)
        if any(size <= 0 for size in out_shape):
            raise self.error(f"the window (kernel {self.geometry.kernel}, pad "
                             f"{self.geometry.pad}, dilation {self.geometry.dilation}) does "
                             f"not fit the input {bottom[0].shape_string()}: output size "
                             f"{out_shape}")
        for blob in top:
            blob.reshape(shape[:self.channel_axis] + (self.num_output,) + out_shape)
        im_shape, col_shape = (out_shape, in_shape) if self.reverse_dimensions \
            else (in_shape, out_shape)
        self.geometry.set_image(self.conv_in_channels, im_shape)
        self.im_dim = self.conv_in_channels * math.prod(im_shape)
        self.out_spatial_dim = math.prod(col_shape)
        self.mat_dim = self.conv_out_channels * self.out_spatial_dim
        self.plan = self._plan()
        if self.plan is Plan.DIRECT:  # no buffers: the whole batch in one block
            self.block = max(self.num, 1)
            return
        per_image = self.kernel_dim * self.group * self.out_spatial_dim
        self.block = max(1, min(self.num, COL_BUFFER_LIMIT // max(per_image, 1)))
        self.cpu_backend.reserve(0 if self.is_1x1 else per_image * self.block,
                                 self.mat_dim * self.block)

    def _plan(self):
        """The plan ``plan.choose_plan`` picks (looked up in its module at every call, so a
        test can replace the rule). Its group-1 rule pays for Convolution on the CPU only:
        Deconvolution and layers reshaped for a GPU pass batch 0 and stay on GEMM (see
        docs/kernel-choices.md, "The DIRECT plan")."""
        cpu = backend.mode() is backend.Mode.CPU
        num = self.num if cpu and not self.reverse_dimensions else 0
        return rules.choose_plan(self.geometry.use_2d, self.group,
                                 self.conv_in_channels // self.group,
                                 self.conv_out_channels // self.group,
                                 math.prod(self.geometry.kernel), num)

    def blocks(self):
        """(first image, image count) of each block of the batch."""
        return [(n, min(self.block, self.num - n)) for n in range(0, self.num, self.block)]

    # --- the column buffer kept from forward to backward --------------------------------
    def note_columns(self, be, x):
        """After ``x``'s forward in one block on the GEMM plan, the column buffer holds
        im2col(x): backward's weight gradient reuses it (Caffe runs im2col again) while
        nothing has written ``x`` (its ``data_stamps``) or the buffer (``_col_buffer``)."""
        whole = self.plan is Plan.GEMM and not self.is_1x1 and self.block >= self.num
        be.columns_of = (self,) + data_stamps((x,)) if whole else None

    def columns_hold(self, be, x):
        """Whether the column buffer still holds im2col(x); ask before reading ``x``."""
        return be.columns_of == (self,) + data_stamps((x,))

    # --- mode -> backend -----------------------------------------------------------------
    def forward_cpu(self, bottom, top):
        self.forward_with(self.cpu_backend, bottom, top)

    def backward_cpu(self, top, propagate_down, bottom):
        self.backward_with(self.cpu_backend, top, propagate_down, bottom)

    def forward_gpu(self, bottom, top):
        self.forward_with(self.gpu_backend(), bottom, top)

    def backward_gpu(self, top, propagate_down, bottom):
        self.backward_with(self.gpu_backend(), top, propagate_down, bottom)

    def gpu_backend(self):
        """The device backend for 2-d windows; the CPU one (logged once) for N-d windows or
        force_nd_im2col, which the CUDA im2col does not cover."""
        if not self.geometry.use_2d:
            backend.log_once(("cpu-fallback", self.type, "nd"),
                             f"{self.type} layers with {self.num_spatial_axes} spatial axes (or "
                             "force_nd_im2col) have no GPU path; running them on the CPU")
            return self.cpu_backend
        if self._gpu_backend is None:
            self._gpu_backend = GpuConvBackend()
        return self._gpu_backend

    def forward_with(self, be, bottom, top):
        raise NotImplementedError

    def backward_with(self, be, top, propagate_down, bottom):
        raise NotImplementedError

    # --- views -------------------------------------------------------------------------
    def im_block(self, array, first, count):
        """Images [first, first + count) of a flat input-side array."""
        return array[first * self.im_dim:(first + count) * self.im_dim]

    def mat_block(self, array, first, count):
        """Images [first, first + count) of a flat output-side array (count, C_out, P)."""
        return array[first * self.mat_dim:(first + count) * self.mat_dim]

    def _dims(self, cols):
        return GemmDims(self.group, self.conv_out_channels // self.group, self.kernel_dim, cols)

    def _col_buffer(self, be, count):
        be.columns_of = None  # whoever asks may write it (see note_columns)
        return be.col_buffer(self.kernel_dim * self.group * self.out_spatial_dim * count)

    def _im2col(self, be, im, count):
        """The column matrix (G, kernel_dim, count P) of ``count`` flat input images; for 1x1
        windows a reordering of the images themselves."""
        col = self._col_buffer(be, count)
        if self.is_1x1:
            be.to_channels(im, count, self.conv_in_channels, self.out_spatial_dim, col)
        else:
            be.im2col(self.geometry, im, count, col)
        return col

    def _to_channels(self, be, mat, count, sums=None):
        """The output side (count, C_out, P) as the matrix (G, C_out / G, count P); with
        ``sums``, also adds each channel's sum to it (see ``bias_sums``)."""
        y = be.mat_buffer(self.mat_dim * count)
        be.to_channels(mat, count, self.conv_out_channels, self.out_spatial_dim, y, sums)
        return y

    # --- the three GEMMs ---------------------------------------------------------------
    def forward_gemm(self, be, im, mat, count, bias=None, skip_im2col=False):
        """mat (count, C_out, P) = W @ im2col(im) (+ bias), ``im`` flat input images; with
        ``skip_im2col``, the column buffer already holds im2col(im)."""
        weights = be.read_data(self.blobs[0])
        relu = self._fused_relu_slope if bias is not None else None
        if self.plan is Plan.DIRECT:
            be.direct_forward(self.geometry, im, count, weights, self.conv_out_channels,
                              self.group, bias, mat, relu)
            return
        if self.is_1x1:
            be.gemm_images(False, weights, im, mat, count, self._dims(self.out_spatial_dim))
            if bias is not None:
                be.add_bias(mat, count, self.conv_out_channels, bias, relu)
            return
        col = self._col_buffer(be, count) if skip_im2col else self._im2col(be, im, count)
        if count == 1:  # one image: the channel layout is the image layout, no reordering
            be.gemm_groups(False, weights, col, mat, self._dims(self.out_spatial_dim))
            if bias is not None:
                be.add_bias(mat, 1, self.conv_out_channels, bias, relu)
            return
        y = be.mat_buffer(self.mat_dim * count)
        be.gemm_groups(False, weights, col, y, self._dims(count * self.out_spatial_dim))
        be.to_images(y, count, self.conv_out_channels, self.out_spatial_dim, mat, bias, relu)

    def backward_gemm(self, be, mat, im, count, mat_transposed=None):
        """im (flat input images) = col2im(W^T @ mat), ``mat`` (count, C_out, P)."""
        weights = be.read_data(self.blobs[0])
        if self.plan is Plan.DIRECT:
            be.direct_backward_data(self.geometry, mat, count, weights, self.conv_out_channels,
                                    self.group, im)
            return
        if self.is_1x1:
            be.gemm_images(True, weights, mat, im, count, self._dims(self.out_spatial_dim))
            return
        y = self._to_channels(be, mat, count) if mat_transposed is None else mat_transposed
        col = self._col_buffer(be, count)
        be.gemm_groups(True, weights, y, col, self._dims(count * self.out_spatial_dim))
        be.col2im(self.geometry, col, count, im)

    def weight_gemm(self, be, im, mat, count, mat_transposed=None, skip_im2col=False):
        """dW += mat @ im2col(im)^T; returns ``mat`` transposed for a following
        backward_gemm (``mat_transposed`` if given), and leaves im2col(im) in the column
        buffer (on the GEMM plan; the DIRECT one returns None). With ``skip_im2col``, the
        column buffer already holds im2col(im)."""
        if self.plan is Plan.DIRECT:
            be.direct_weight_grad(self.geometry, im, mat, count, self.conv_out_channels,
                                  self.group, be.write_diff(self.blobs[0]))
            return None
        col = self._col_buffer(be, count) if skip_im2col else self._im2col(be, im, count)
        y = self._to_channels(be, mat, count) if mat_transposed is None else mat_transposed
        be.weight_grad(y, col, be.write_diff(self.blobs[0]),
                       self._dims(count * self.out_spatial_dim))
        return y

    # --- bias --------------------------------------------------------------------------
    def backward_bias(self, be, diff):
        """db += the output-side ``diff`` (flat) summed over images and positions."""
        if self.bias_term and self.param_propagate_down[1]:
            be.bias_grad(diff, self.num, self.num_output, be.write_diff(self.blobs[1]))

    def bias_sums(self, be):
        """Zeroed per-channel sums for ``_to_channels`` to collect the bias gradient in,
        block by block, where the backend fuses them (the CPU); else None (no gradient, or
        ``backward_bias`` computes it). Sums run image by image, each image's positions in
        numpy's pairwise order: the numbers of ``diff.sum(axis=(0, 2))``, whether or not the
        batch runs in blocks."""
        if self.bias_term and self.param_propagate_down[1] and be.fuses_bias_sums:
            return be.zeros(self.num_output)
        return None

    def add_bias_diff(self, be, sums):
        """db += ``sums`` (from ``bias_sums``)."""
        be.write_diff(self.blobs[1])[...] += sums
