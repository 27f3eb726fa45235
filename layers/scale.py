"""Scale: multiply the bottom by a broadcast scale, optionally adding a bias (Caffe's ScaleLayer).

The scale s is bottom[1] or a learnable blob; its shape must equal bottom[0]'s shape over the
axes [axis, axis + s.num_axes), and bottom[0] is viewed as (outer, scale_dim, inner) around
them (a scalar scale uses axis 0):

    forward:   y[o, d, i] = x[o, d, i] * s[d]  (+ b[d] with bias_term)
    backward:  dx = dy * s;   ds[d] = sum_{o, i} dy[o, d, i] * x[o, d, i];   db as in Bias

A learnable scale has the shape bottom[0].shape[axis:axis + num_axes] (num_axes -1: to the
end) and is filled by ``filler`` (default constant 1). With ``bias_term`` an internal Bias
layer (axis, num_axes = the scale's axes, ``bias_filler``) adds the bias in place on the top;
its blob is this layer's last blob. Learnable gradients accumulate; a scale given as bottom[1]
has its diff overwritten. In-place computation is allowed (the bottom is saved for backward).

On the CPU the forward is one pass (product and bias, kernels/cpu/channel_affine.py) and the
backward one kernel for the scale's and the bias's gradients and dx
(kernels/cpu/channel_grads.py); in place the bottom is saved in a buffer reused from pass to
pass. GPU mode: the same steps on the device with Bias's kernels (``broadcast``, and
``BroadcastGradient`` for the scale's gradient, gathered without atomics); in place the
bottom is saved in a device buffer.
"""
import numpy as np

from pycaffe_cli.blob import Blob, read_only
from pycaffe_cli.fillers import fill
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.bias import (BiasLayer, BroadcastGradient, broadcast, broadcast_dims,
                                     broadcast_param_shape)
from pycaffe_cli.layers.inference_hooks import ReluFusingHooks
from pycaffe_cli.layers.kernels.cpu import channel_affine, channel_grads
from pycaffe_cli.layers.kernels.cpu.layout import NO_BIAS
from pycaffe_cli.cuda import memory
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.sizes import grow


def _unit_filler():
    filler = caffe_pb2.FillerParameter()
    filler.type = "constant"
    filler.value = 1.0
    return filler


class ScaleInferenceHooks(ReluFusingHooks):
    """The forward-only pass on the CPU is one pass over the data (product, bias and the
    ReLU the plan fuses in: kernels/cpu/channel_affine.py), keeping no copy of an in-place
    bottom for a backward pass that will not come."""

    def forward_pass(self):
        layer = self.layer
        return layer.forward_gpu if layer._use_gpu("forward") else layer._forward_values_cpu


@register("Scale")
class ScaleLayer(Layer):
    """scale_param: axis (1), num_axes (1), filler (constant 1), bias_term, bias_filler."""

    min_num_bottom = 1
    max_num_bottom = 2
    exact_num_top = 1
    in_place_ok = True
    inference_hooks = ScaleInferenceHooks
    # ReLU's negative slope to apply to the top (None: none): the inference plan's, on a
    # layer of its own that BatchNorm / Scale / Bias layers were folded into, in CPU mode
    # only (pycaffe_cli/inference/fold.py).
    _fused_relu_slope = None

    def layer_setup(self, bottom, top):
        p = self.param.scale_param
        if len(bottom) == 1 and not self.blobs:
            shape = broadcast_param_shape(self, bottom[0], p.axis, p.num_axes, "scale")
            self.blobs = [Blob(shape)]
            fill(self.blobs[0], p.filler if p.HasField("filler") else _unit_filler(),
                 self.name)
        self._bias_layer = self._make_bias_layer(bottom, top) if p.bias_term else None
        self.param_propagate_down = [True] * len(self.blobs)
        self._saved_bottom = np.empty(0, np.float32)  # an in-place bottom, kept for backward
        self._gpu_saved_bottom = Blob()  # the device path's copy of an in-place bottom
        self._gpu_gradient = BroadcastGradient()

    def _make_bias_layer(self, bottom, top):
        p = self.param.scale_param
        param = caffe_pb2.LayerParameter()
        param.CopyFrom(self.param)
        param.type = "Bias"
        del param.blobs[:]
        param.bias_param.axis = p.axis
        param.bias_param.num_axes = bottom[1].num_axes if len(bottom) > 1 else p.num_axes
        param.bias_param.filler.CopyFrom(p.bias_filler)
        layer = BiasLayer(param)
        has_bias_blob = len(self.blobs) + len(bottom) >= 3
        if has_bias_blob:  # the bias came with the layer's blobs
            layer.blobs = [self.blobs[-1]]
        layer.setup([bottom[0]], top)
        if not has_bias_blob:
            self.blobs.append(layer.blobs[0])
        return layer

    def _scale(self, bottom):
        return bottom[1] if len(bottom) > 1 else self.blobs[0]

    def reshape(self, bottom, top):
        self.dims = broadcast_dims(self, bottom[0], self._scale(bottom),
                                   self.param.scale_param.axis, "scale")
        if top[0] is not bottom[0]:
            top[0].reshape_like(bottom[0])
        else:
            self._gpu_saved_bottom.reshape_like(bottom[0])
        if self._bias_layer is not None:
            self._bias_layer.reshape([top[0]], top)

    def forward_cpu(self, bottom, top):
        if self._fused_relu_slope is not None:  # the inference plan's layer: no backward
            self._forward_values_cpu(bottom, top)
            return
        saved = None
        if top[0] is bottom[0]:  # backward still needs x for the scale's gradient
            self._saved_bottom = grow(self._saved_bottom, bottom[0].count(),
                                      "Scale's copy of its bottom")
            saved = self._saved_bottom
        self._forward_values_cpu(bottom, top, saved)

    def _forward_values_cpu(self, bottom, top, saved=None):
        """The top in one pass, with the fused ReLU (ScaleInferenceHooks); the bottom copied
        to ``saved`` in the same pass where given."""
        _, dim, inner = self.dims
        slope, has_bias = self._fused_relu_slope, self._bias_layer is not None
        bias = self.blobs[-1].cpu_data.reshape(-1) if has_bias else NO_BIAS
        x = bottom[0].cpu_data.reshape(-1)
        channel_affine.forward(x, self._scale(bottom).cpu_data.reshape(-1), bias, has_bias,
                               top[0].flat_data, np.float32(slope or 0), slope is not None,
                               dim, inner, saved)

    def backward_cpu(self, top, propagate_down, bottom):
        outer, dim, inner = self.dims
        dy = top[0].cpu_diff.reshape(-1)
        scale = self._scale(bottom)
        learnable = len(bottom) == 1
        wants_scale = self.param_propagate_down[0] if learnable else propagate_down[1]
        wants_bias = self._bias_layer is not None and self.param_propagate_down[-1]
        if not (wants_scale or wants_bias or propagate_down[0]):
            return
        x = (read_only(self._saved_bottom) if top[0] is bottom[0]
             else bottom[0].cpu_data.reshape(-1)) if wants_scale else dy
        scale_grad = np.empty(dim) if wants_scale else channel_grads.NO_SUMS
        bias_grad = np.empty(dim) if wants_bias else channel_grads.NO_SUMS
        dx = bottom[0].flat_diff if propagate_down[0] else channel_grads.NO_VALUES
        channel_grads.scale_backward(dy, x, scale.cpu_data.reshape(-1), outer, dim, inner,
                                     scale_grad, bias_grad, dx)
        if wants_scale:
            if learnable:
                scale.flat_diff[...] += scale_grad
            else:
                scale.flat_diff[...] = scale_grad
        if wants_bias:
            self.blobs[-1].flat_diff[...] += bias_grad

    # --- GPU ---------------------------------------------------------------------------
    def forward_gpu(self, bottom, top):
        outer, dim, inner = self.dims
        x = bottom[0].gpu_data
        if top[0] is bottom[0]:
            memory.copy(x, self._gpu_saved_bottom.mutable_gpu_data)
        broadcast(x, self._scale(bottom).gpu_data, dim, inner, True,
                  top[0].mutable_gpu_data)
        if self._bias_layer is not None:
            self._bias_layer.forward_gpu([top[0]], top)

    def backward_gpu(self, top, propagate_down, bottom):
        if self._bias_layer is not None and self.param_propagate_down[-1]:
            self._bias_layer.backward_gpu(top, [False], [top[0]])
        outer, dim, inner = self.dims
        dy = top[0].gpu_diff
        scale = self._scale(bottom)
        learnable = len(bottom) == 1
        if (self.param_propagate_down[0] if learnable else propagate_down[1]):
            x = (self._gpu_saved_bottom if top[0] is bottom[0] else bottom[0])
            self._gpu_gradient.run(self.dims, dy, x.gpu_data, scale.mutable_gpu_diff,
                                   learnable)
        if propagate_down[0]:
            broadcast(dy, scale.gpu_data, dim, inner, True, bottom[0].mutable_gpu_diff)
