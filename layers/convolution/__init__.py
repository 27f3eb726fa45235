"""The convolution family: Convolution and Deconvolution, and the machinery they share.

Caffe's BaseConvolutionLayer split by concern, one module each:

* ``base``: ``BaseConvolutionLayer``, parameters, shapes and the three GEMMs written once
  (forward_gemm, backward_gemm, weight_gemm), the column buffer kept from forward to
  backward, and the family's inference hooks;
* ``columns``: ``ColumnGeometry``, a window over images of one shape, with im2col / col2im
  dispatched to the 2-d or the N-d kernels (the Im2col layer uses it too);
* ``plan``: which plan a layer runs (im2col + GEMM, Caffe's, or DIRECT window sums) and
  whether the inference plan runs it as Winograd F(4x4, 3x3): the rules and their thresholds;
* ``backend``: the primitives the plan runs on, host numpy arrays (``CpuConvBackend``) or
  device arrays (``GpuConvBackend``);
* ``convolution`` (registers "Convolution") and ``deconvolution`` (registers
  "Deconvolution"): the layers, each the same GEMMs in another order.

The kernels they call stay with the other kernels, CPU and CUDA twins of the same names:
layers/kernels/cpu/{im2col,layout,depthwise,winograd}.py and layers/kernels/cuda/.

This file imports nothing: modules of the family import each other by their full names, and
the layer registry (layers/base.py) finds the two layer modules by walking the package.
"""
