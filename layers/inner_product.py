"""InnerProduct: a fully connected layer (Caffe's InnerProductLayer).

The bottom is viewed as an M x K matrix X, splitting its axes at ``axis``
(M = count(0, axis), K = count(axis)). With weights W (N x K, or K x N when ``transpose``)
and bias b (N):

    forward:   Y = X W^T + 1 b^T          (transpose: Y = X W)
    backward:  dW += dY^T X               (transpose: dW += X^T dY; in row blocks)
               db += dY^T 1
               dX  = dY W                 (transpose: dX = dY W^T)

The top has the bottom's leading ``axis`` axes followed by N.
"""
import numpy as np

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda.views import first
from pycaffe_cli.fillers import fill
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.inference_hooks import ReluFusingHooks
from pycaffe_cli import blas
from pycaffe_cli.layers.kernels.cpu.gemm import gemm_accumulate
from pycaffe_cli.layers.kernels.cpu.layout import add_channel_bias_relu
from pycaffe_cli.layers.views import layer_axis


@register("InnerProduct", v1="INNER_PRODUCT")
class InnerProductLayer(Layer):
    """Y = X W^T + b over the bottom's axes from ``inner_product_param.axis`` on."""

    exact_num_bottom = 1
    exact_num_top = 1
    inference_hooks = ReluFusingHooks  # the plan's ReLU, applied with the bias
    # ReLU's negative slope to apply with the bias (None: none): the inference plan's, on its
    # own copies, in CPU mode only (ReluFusingHooks).
    _fused_relu_slope = None

    def layer_setup(self, bottom, top):
        p = self.param.inner_product_param
        if p.num_output <= 0:
            raise self.error("inner_product_param.num_output must be positive, got "
                             f"{p.num_output}")
        self.num_output = p.num_output
        self.bias_term = p.bias_term
        self.transpose = p.transpose
        axis = layer_axis(self, bottom[0], p.axis)
        self.k = bottom[0].count(axis)
        n, k = self.num_output, self.k
        weight_shape = (k, n) if self.transpose else (n, k)
        if self.blobs:
            self._check_given_blobs(weight_shape)
        else:
            self.blobs = [Blob(weight_shape)]
            fill(self.blobs[0], p.weight_filler, self.name)
            if self.bias_term:
                self.blobs.append(Blob((n,)))
                fill(self.blobs[1], p.bias_filler, self.name)
        self.param_propagate_down = [True] * len(self.blobs)

    def _check_given_blobs(self, weight_shape):
        wanted = [weight_shape] + ([(self.num_output,)] if self.bias_term else [])
        got = [blob.shape for blob in self.blobs]
        if len(got) != len(wanted) or any(
                int(np.prod(g)) != int(np.prod(w)) for g, w in zip(got, wanted)):
            raise self.error(f"the layer's given blobs have shapes {got}, but num_output, "
                             f"bias_term and the input size need {wanted}")

    def reshape(self, bottom, top):
        axis = layer_axis(self, bottom[0], self.param.inner_product_param.axis)
        new_k = bottom[0].count(axis)
        if new_k != self.k:
            raise self.error(f"Input size incompatible with inner product parameters: the "
                             f"bottom {bottom[0].shape_string()} has {new_k} inputs from axis "
                             f"{axis}, the weights expect {self.k}")
        self.m = bottom[0].count(0, axis)
        top[0].reshape(bottom[0].shape[:axis] + (self.num_output,))

    def _weight(self):
        """W as an N x K matrix view (a transpose view when stored K x N)."""
        w = self.blobs[0].data.reshape(-1, self.num_output) if self.transpose \
            else self.blobs[0].data.reshape(self.num_output, -1)
        return w.T if self.transpose else w

    def forward_cpu(self, bottom, top):
        x = bottom[0].data.reshape(self.m, self.k)
        y = top[0].data.reshape(self.m, self.num_output)
        if self.m > 1:
            # Y^T = W X^T, then transposed: the same dot products (a BLAS kernel may sum them
            # in another order), but OpenBLAS streams the weights faster this way round where
            # the batch is small (docs/kernel-choices.md, "InnerProduct's forward").
            y_t = np.empty((self.num_output, self.m), np.float32)
            blas.matmul(self._weight(), x.T, y_t)
            np.copyto(y, y_t.T)
        else:
            blas.matmul(x, self._weight().T, y)
        if self.bias_term and self._fused_relu_slope is not None:
            add_channel_bias_relu(y.reshape(-1), self.m, self.num_output, 1,
                                  self.blobs[1].flat_data, np.float32(self._fused_relu_slope))
        elif self.bias_term:
            y += self.blobs[1].data.reshape(1, -1)

    def backward_cpu(self, top, propagate_down, bottom):
        dy = top[0].diff.reshape(self.m, self.num_output)
        x = bottom[0].data.reshape(self.m, self.k)
        if self.param_propagate_down[0]:
            if self.transpose:
                gemm_accumulate(x.T, dy, self.blobs[0].diff.reshape(self.k, self.num_output))
            else:
                gemm_accumulate(dy.T, x, self.blobs[0].diff.reshape(self.num_output, self.k))
        if self.bias_term and self.param_propagate_down[1]:
            self.blobs[1].diff.reshape(-1)[...] += dy.sum(axis=0)
        if propagate_down[0]:
            blas.matmul(dy, self._weight(), bottom[0].diff.reshape(self.m, self.k))

    # --- GPU: the same products as cuBLAS GEMMs (Caffe's inner_product_layer.cu) ----------
    def forward_gpu(self, bottom, top):
        from pycaffe_cli.cuda import math
        from pycaffe_cli.layers.kernels.cuda import layout
        if self._fused_relu_slope is not None:
            raise NotImplementedError("InnerProduct fuses a ReLU on the CPU only")
        y = top[0].mutable_gpu_data
        math.gemm(False, not self.transpose, self.m, self.num_output, self.k, 1.0,
                  bottom[0].gpu_data, self.blobs[0].gpu_data, 0.0,
                  y)
        if self.bias_term:
            layout.add_channel_bias(y, self.m, self.num_output, 1,
                                    self.blobs[1].gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        from pycaffe_cli.cuda import math
        dy = top[0].gpu_diff
        m, n, k = self.m, self.num_output, self.k
        if self.param_propagate_down[0]:
            x = bottom[0].gpu_data
            if self.transpose:
                math.gemm(True, False, k, n, m, 1.0, x, dy, 1.0, self.blobs[0].mutable_gpu_diff)
            else:
                math.gemm(True, False, n, k, m, 1.0, dy, x, 1.0, self.blobs[0].mutable_gpu_diff)
        if self.bias_term and self.param_propagate_down[1]:
            math.gemv(True, m, n, 1.0, dy, self._gpu_ones(m), 1.0, self.blobs[1].mutable_gpu_diff)
        if propagate_down[0]:
            math.gemm(False, self.transpose, m, k, n, 1.0, dy,
                      self.blobs[0].gpu_data, 0.0, bottom[0].mutable_gpu_diff)

    def _gpu_ones(self, size):
        """A device vector of ``size`` ones (the bias gradient's GEMV), grown on demand."""
        if not hasattr(self, "_ones"):
            self._ones = Blob((0,))
        if self._ones.count() < size:
            self._ones.reshape((size,))
            self._ones.data[...] = np.float32(1)
        return first(self._ones.gpu_data, size)
