"""Reorder (de)convolution outputs between the GEMM layout and the blob layout, on the GPU.

The GEMMs of layers/convolution see the output side as (C, num, P) (channels, images,
positions); blobs hold (num, C, P). One thread per destination element gathers its source
element, so each kernel is a plain copy (the bias add rides along on the way out).
"""
from numba import cuda

from pycaffe_cli.cuda.launch import launch


@cuda.jit(cache=True)
def _channels_to_images_kernel(n, src, num, channels, size, bias, use_bias, dst):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        p = index % size
        c = (index // size) % channels
        image = index // (size * channels)
        value = src[(c * num + image) * size + p]
        if use_bias:
            value += bias[c]
        dst[index] = value


@cuda.jit(cache=True)
def _images_to_channels_kernel(n, src, num, channels, size, dst):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        p = index % size
        image = (index // size) % num
        c = index // (size * num)
        dst[index] = src[(image * channels + c) * size + p]


@cuda.jit(cache=True)
def _add_channel_bias_kernel(n, channels, size, bias, data):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        data[index] += bias[(index // size) % channels]


def channels_to_images(src, num, channels, size, dst, bias=None):
    """dst (num, C, P) = src (C, num, P) (+ bias[c]); flat device arrays."""
    n = num * channels * size
    use_bias = bias is not None
    launch(_channels_to_images_kernel, n, src, num, channels, size,
           bias if use_bias else src, use_bias, dst)


def images_to_channels(src, num, channels, size, dst):
    """dst (C, num, P) = src (num, C, P); flat device arrays."""
    launch(_images_to_channels_kernel, num * channels * size, src, num, channels, size, dst)


def add_channel_bias(data, num, channels, size, bias):
    """data (num, C, P) += bias[c]."""
    launch(_add_channel_bias_kernel, num * channels * size, channels, size, bias, data)
