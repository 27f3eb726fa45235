"""Silence: consume blobs that nothing else uses, so the net does not print them
(Caffe's SilenceLayer). No tops; forward does nothing; backward writes zero gradients:

    bottom_i.diff = 0   for every bottom that needs a gradient

GPU mode zeroes the diffs on the device.
"""
from pycaffe_cli.cuda import memory
from pycaffe_cli.layers.base import Layer, register


@register("Silence", v1="SILENCE")
class SilenceLayer(Layer):
    """Any number (at least one) of bottoms, no tops."""

    min_num_bottom = 1
    exact_num_top = 0

    def reshape(self, bottom, top):
        """No tops to shape."""

    def forward_cpu(self, bottom, top):
        """Nothing to compute."""

    def backward_cpu(self, top, propagate_down, bottom):
        for blob, down in zip(bottom, propagate_down):
            if down:
                blob.diff[...] = 0

    def forward_gpu(self, bottom, top):
        """Nothing to compute."""

    def backward_gpu(self, top, propagate_down, bottom):
        for blob, down in zip(bottom, propagate_down):
            if down:
                memory.fill(blob.mutable_gpu_diff, 0)
