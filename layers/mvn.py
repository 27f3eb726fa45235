"""MVN: mean-variance normalisation of each instance (Caffe's MVNLayer).

The bottom is viewed as rows of ``dim`` values: one row per (num, channel) pair, or one per
num with ``across_channels``. Per row, with mu the mean and sigma = sqrt(mean((x - mu)^2)):

    forward:   y = x - mu                            (normalize_variance false)
               y = (x - mu) / (sigma + eps)          (normalize_variance true; eps after sqrt)
    backward:  dx = dy - mean(dy)                    (normalize_variance false)
               dx = (dy - mean(dy) - mean(dy * y) * y) / (sigma + eps)

The backward formula is Caffe's: it drops the factor (sigma + eps) / sigma of the exact
derivative of the last term, which is 1 up to eps.
"""
import numpy as np

from pycaffe_cli.layers.base import Layer, register


@register("MVN", v1="MVN")
class MVNLayer(Layer):
    """mvn_param: normalize_variance (default true), across_channels (false), eps (1e-9)."""

    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.param.mvn_param
        self.normalize_variance = p.normalize_variance
        self.across_channels = p.across_channels
        self.eps = np.float32(p.eps)
        self._sigma = None

    def reshape(self, bottom, top):
        source = bottom[0]
        self.rows = source.num if self.across_channels else source.num * source.channels
        top[0].reshape_like(source)

    def _rows(self, array):
        return array.reshape(self.rows, -1)

    def forward_cpu(self, bottom, top):
        x = self._rows(bottom[0].data)
        if x.size == 0:
            return
        centred = x - x.mean(axis=1, keepdims=True, dtype=np.float64).astype(np.float32)
        if self.normalize_variance:
            variance = np.square(centred).mean(axis=1, keepdims=True, dtype=np.float64)
            self._sigma = np.sqrt(variance).astype(np.float32) + self.eps
            centred /= self._sigma
        self._rows(top[0].data)[...] = centred

    def backward_cpu(self, top, propagate_down, bottom):
        if not propagate_down[0] or bottom[0].count() == 0:
            return
        dy = self._rows(top[0].diff)
        mean_dy = dy.mean(axis=1, keepdims=True, dtype=np.float64).astype(np.float32)
        if self.normalize_variance:
            y = self._rows(top[0].data)
            mean_dy_y = np.einsum("ij,ij->i", dy, y, dtype=np.float64)[:, None] / y.shape[1]
            dx = (dy - mean_dy - mean_dy_y.astype(np.float32) * y) / self._sigma
        else:
            dx = dy - mean_dy
        self._rows(bottom[0].diff)[...] = dx
