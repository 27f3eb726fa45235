"""Embed: look up a learned vector for each integer index (Caffe's EmbedLayer).

The bottom holds M indices (stored as floats, truncated to integers as Caffe's static_cast
does) in [0, input_dim). With weights W (input_dim x num_output, transposed from
InnerProduct) and bias b (num_output):

    forward:   y[m, :] = W[x_m, :] + b                 (top shape: bottom shape + (num_output,))
    backward:  dW[x_m, :] += dy[m, :];   db += sum_m dy[m, :]

The indices receive no gradient.
"""
import numpy as np

from pycaffe_cli.blob import Blob
from pycaffe_cli.fillers import fill
from pycaffe_cli.layers.base import Layer, register


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
        index = bottom[0].flat_data.astype(np.int64)
        bad = (index < 0) | (index >= self.input_dim)
        if bad.any():
            value = bottom[0].flat_data[np.argmax(bad)]
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
