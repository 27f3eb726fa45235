"""Pooling kernels (Caffe's PoolingLayer maths) over planes of shape (N*C, H, W) (CPU, numba).

One module per method, beside the window geometry they share; this package's names are the
kernels' public face, the same names and signatures as the CUDA twin's
(kernels/cuda/pooling.py):

* ``window``: the window of each output clipped to the image (and, for AVE's divisor, to the
  padded image), and the outputs whose windows hold each input pixel;
* ``max_pool``: MAX forward with its argmax mask, forward without the mask (the inference
  plan's), and backward;
* ``ave_pool``: AVE forward (global average pooling on its own path) and backward;
* ``sto_pool``: STOCHASTIC, TRAIN and TEST, forward and backward, as per-element bodies the
  CUDA twin compiles too.

Sums run in float32 in Caffe's order (row-major over a window; across windows, row-major over
the windows), so the numbers are Caffe CPU's. Indices are cast to ``uintp``: numba cannot
prove a signed index non-negative, and its wraparound handling made these loops several
times slower. The modules import each other by their full names, never this package.
"""
from pycaffe_cli.layers.kernels.cpu.pooling.ave_pool import ave_pool_backward, ave_pool_forward
from pycaffe_cli.layers.kernels.cpu.pooling.max_pool import max_pool_backward, \
    max_pool_forward, max_pool_forward_values
from pycaffe_cli.layers.kernels.cpu.pooling.sto_pool import sto_pool_backward, \
    sto_pool_backward_test, sto_pool_forward_test, sto_pool_forward_train

__all__ = ["ave_pool_backward", "ave_pool_forward", "max_pool_backward", "max_pool_forward",
           "max_pool_forward_values", "sto_pool_backward", "sto_pool_backward_test",
           "sto_pool_forward_test", "sto_pool_forward_train"]
