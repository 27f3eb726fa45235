"""Direct (im2col-free) grouped convolution, for groups whose GEMMs are tiny (CPU, numba).

Depthwise convolution (MobileNet's 3x3 layers: one input and one output channel per group)
run as im2col + one GEMM per group spends its time unfolding the image and in GEMMs of one
row. These kernels sum the windows directly. With G groups, C channels on the input side (the
side im2col unfolds) and M on the output side, g = m // (M / G)::

    im       (num, C, height, width)         weights (M, C / G, kernel_h, kernel_w)
    out      (num, M, out_h, out_w)
    out[n, m, oh, ow] = sum over c < C / G, ki, kj of  weights[m, c, ki, kj]
        * im[n, g C / G + c, oh stride_h - pad_h + ki dilation_h,
                             ow stride_w - pad_w + kj dilation_w]      (+ bias[m])

with ``im`` 0 outside the image. One module per part:

* ``phases``: the "phase planes" that turn every tap into one contiguous loop over a plane,
  and the output grids the loops run over;
* ``forward``: the forward pass (+ bias, + the inference plan's fused ReLU);
* ``backward``: the weight, bias and input gradients in one pass over the output-side
  gradient, and ``backward_data`` / ``weight_grad``, that pass asked for one of them.

Jobs run in a few ``prange`` parts per thread, each part allocating its buffers once; LLVM
knows such buffers alias nothing, so the loops vectorise without runtime overlap checks.
Arrays are flat (1-d) C-contiguous float32; indices are cast to ``uintp`` (numba cannot prove
a signed index non-negative; see kernels/cpu/im2col.py). This package's names are the
kernels' public face: the CUDA twins of ``forward``, ``backward_data`` and ``weight_grad`` in
kernels/cuda/depthwise.py have the same names and signatures. The modules import each other
by their full names, never this package.
"""
from pycaffe_cli.layers.kernels.cpu.depthwise.backward import backward, backward_data, \
    weight_grad
from pycaffe_cli.layers.kernels.cpu.depthwise.forward import forward

__all__ = ["backward", "backward_data", "forward", "weight_grad"]
