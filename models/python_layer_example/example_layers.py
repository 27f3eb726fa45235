"""Python layers for models/python_layer_example (run from the repository root):

    PYTHONPATH=models/python_layer_example pycaffe train \
        --solver models/python_layer_example/solver.prototxt

Each class is written as for BVLC's pycaffe (``import caffe``, subclasses of ``caffe.Layer``):
``setup``, ``reshape``, ``forward`` and ``backward`` on the bottom and top blobs' numpy
``data`` and ``diff``.
"""
import caffe
import numpy as np


def parse_params(param_str):
    """``"outputs=2 seed=7"`` -> {"outputs": 2, "seed": 7} (integers only)."""
    return {key: int(value) for key, value in (word.split("=") for word in param_str.split())}


class LinearTarget(caffe.Layer):
    """Regression targets: top = bottom W^T for a fixed random W (param_str: outputs, seed)."""

    def setup(self, bottom, top):
        params = parse_params(self.param_str)
        rng = np.random.default_rng(params.get("seed", 0))
        inputs = bottom[0].count // bottom[0].num
        self.weight = rng.normal(size=(params["outputs"], inputs)).astype(np.float32)

    def reshape(self, bottom, top):
        top[0].reshape(bottom[0].num, self.weight.shape[0])

    def forward(self, bottom, top):
        top[0].data[...] = bottom[0].data.reshape(bottom[0].num, -1) @ self.weight.T

    def backward(self, top, propagate_down, bottom):
        pass  # targets are constants


class LearnableScale(caffe.Layer):
    """top = a * bottom with one learnable scalar a (initial value from param_str: init)."""

    def setup(self, bottom, top):
        if not self.blobs:  # weights loaded from a snapshot come already filled
            self.blobs.add_blob(1)
            self.blobs[0].data[...] = parse_params(self.param_str).get("init", 1)

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        top[0].data[...] = self.blobs[0].data[0] * bottom[0].data

    def backward(self, top, propagate_down, bottom):
        self.blobs[0].diff[0] += np.sum(top[0].diff * bottom[0].data)
        if propagate_down[0]:
            bottom[0].diff[...] = self.blobs[0].data[0] * top[0].diff


class EuclideanLoss(caffe.Layer):
    """loss = sum((bottom0 - bottom1)^2) / (2 num), pycaffe's classic example layer."""

    def setup(self, bottom, top):
        if len(bottom) != 2:
            raise ValueError("EuclideanLoss needs two bottoms (prediction, target)")

    def reshape(self, bottom, top):
        if bottom[0].count != bottom[1].count:
            raise ValueError("the prediction and the target must have the same count")
        self.diff = np.zeros_like(bottom[0].data, dtype=np.float32)
        top[0].reshape(1)

    def forward(self, bottom, top):
        self.diff[...] = bottom[0].data - bottom[1].data.reshape(self.diff.shape)
        top[0].data[...] = np.sum(self.diff ** 2) / bottom[0].num / 2.0

    def backward(self, top, propagate_down, bottom):
        for i, sign in enumerate((1, -1)):
            if propagate_down[i]:
                bottom[i].diff[...] = (sign * top[0].diff[0] * self.diff
                                       / bottom[i].num).reshape(bottom[i].diff.shape)
