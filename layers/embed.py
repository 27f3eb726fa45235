"""Embed: look up a learned vector for each integer index (Caffe's EmbedLayer).

The bottom holds M indices (stored as floats, truncated to integers as Caffe's static_cast
does) in [0, input_dim). With weights W (input_dim x num_output, transposed from
InnerProduct) and bias b (num_output):

    forward:   y[m, :] = W[x_m, :] + b                 (top shape: bottom shape + (num_output,))
    backward:  dW[x_m, :] += dy[m, :];   db += sum_m dy[m, :]

The indices receive no gradient.

GPU mode gathers the weight rows on the device. The weight gradient gathers too, without
atomics: the indices are sorted on the device and one thread per weight element adds the
top diffs of the indices that name its row, in order (``pycaffe_cli/cuda/copy.py``); the bias
gradient is Bias's column-sum gather. Out-of-range indices are caught on the host when the
host copy of the indices is current (fed from the host: no copy back needed); indices made on
the device are not read back, and a bad one gives a zero row (plus bias) and no gradient.
"""
import numpy as np

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda import copy
from pycaffe_cli.fillers import fill
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.bias import BroadcastGradient
from pycaffe_cli.layers.kernels.cuda import layout
from pycaffe_cli.synced_memory import Head


@register("Embed")
class EmbedLayer(Layer):
    """embed_param: num_output, input_dim, bias_term (default true), weight/bias fillers."""

    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.param.embed_param
        if p.num_output <= 0:
            raise self.error("EmbedLayer num_output must be positive.")
        if p.input_dim <= 0:
            raise self.error("EmbedLayer input_dim must be positive.")
        self.num_output, self.input_dim, self.bias_term = p.num_output, p.input_dim, p.bias_term
        if self.blobs:
            self._check_given_blobs()
        else:
            self.blobs = [Blob((self.input_dim, self.num_output))]
            fill(self.blobs[0], p.weight_filler, self.name)
            if self.bias_term:
                self.blobs.append(Blob((self.num_output,)))
                fill(self.blobs[1], p.bias_filler, self.name)
        self.param_propagate_down = [True] * len(self.blobs)
        self._row_order = copy.RowOrder()
        self._gpu_bias_gradient = BroadcastGradient()

    def _check_given_blobs(self):
        wanted = [(self.input_dim, self.num_output)] + ([(self.num_output,)]
                                                        if self.bias_term else [])
        got = [blob.shape for blob in self.blobs]
        if len(got) != len(wanted) or any(
                int(np.prod(g)) != int(np.prod(w)) for g, w in zip(got, wanted)):
            raise self.error(f"the layer's given blobs have shapes {got}, but input_dim, "
                             f"num_output and bias_term need {wanted}")

    def reshape(self, bottom, top):
        top[0].reshape(bottom[0].shape + (self.num_output,))

    def _indices(self, bottom):
        values = bottom[0].cpu_data.ravel()
        index = values.astype(np.int64)
        bad = (index < 0) | (index >= self.input_dim)
        if bad.any():
            value = values[np.argmax(bad)]
            raise self.error(f"index {value:g} in the bottom is out of range for input_dim "
                             f"{self.input_dim} (indices must lie in [0, {self.input_dim}))")
        return index

    def forward_cpu(self, bottom, top):
        y = top[0].data.reshape(-1, self.num_output)
        np.take(self.blobs[0].data.reshape(self.input_dim, self.num_output),
                self._indices(bottom), axis=0, out=y)
        if self.bias_term:
            y += self.blobs[1].data.reshape(1, -1)

    def backward_cpu(self, top, propagate_down, bottom):
        if propagate_down[0]:
            raise self.error("Can't backpropagate to EmbedLayer input.")
        dy = top[0].diff.reshape(-1, self.num_output)
        if self.param_propagate_down[0]:
            weight_diff = self.blobs[0].diff.reshape(self.input_dim, self.num_output)
            np.add.at(weight_diff, self._indices(bottom), dy)
        if self.bias_term and self.param_propagate_down[1]:
            self.blobs[1].flat_diff[...] += dy.sum(axis=0, dtype=np.float64)

    def allow_force_backward(self, bottom_index):
        return False

    # --- GPU ---------------------------------------------------------------------------
    def forward_gpu(self, bottom, top):
        if bottom[0].data_memory.head in (Head.AT_CPU, Head.SYNCED):
            self._indices(bottom)  # the range check, free while the host copy is current
        m, n = bottom[0].count(), self.num_output
        y = top[0].mutable_gpu_data
        copy.gather_rows(bottom[0].gpu_data, m, self.input_dim, n,
                         self.blobs[0].gpu_data, y)
        if self.bias_term:
            layout.add_channel_bias(y, m, n, 1, self.blobs[1].gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        if propagate_down[0]:
            raise self.error("Can't backpropagate to EmbedLayer input.")
        m, n = bottom[0].count(), self.num_output
        dy = top[0].gpu_diff
        if self.param_propagate_down[0]:
            self._row_order.gather_add_rows(bottom[0].gpu_data, m,
                                            self.input_dim, n, dy, self.blobs[0].mutable_gpu_diff,
                                            accumulate=True)
        if self.bias_term and self.param_propagate_down[1]:
            self._gpu_bias_gradient.run((m, n, 1), dy, None, self.blobs[1].mutable_gpu_diff, True)
