"""Window geometry shared by convolution, im2col and pooling (one definition of each rule).

The scalar rules are plain Python functions compiled with numba for CPU kernels
(``conv_out_size``/``pool_out_size``) and callable unchanged from layers; CUDA kernels can
compile the same bodies with ``numba.cuda.jit(device=True)``.
"""
from numba import njit

from pycaffe_cli.errors import layer_error


def conv_out_size_py(size, kernel, pad, stride, dilation):
    """Caffe's convolution output size: floor((size + 2 pad - (dilation (kernel - 1) + 1))
    / stride) + 1."""
    extent = dilation * (kernel - 1) + 1
    return (size + 2 * pad - extent) // stride + 1


def pool_out_size_py(size, kernel, pad, stride):
    """Caffe's pooling output size: ceil((size + 2 pad - kernel) / stride) + 1, then one less
    if the last window would start in the padding (so every window overlaps the image)."""
    pooled = -((-(size + 2 * pad - kernel)) // stride) + 1
    if pad > 0 and (pooled - 1) * stride >= size + pad:
        pooled -= 1
    return pooled


conv_out_size = njit(cache=True)(conv_out_size_py)
pool_out_size = njit(cache=True)(pool_out_size_py)


def _axis_values(layer_name, what, values, h_w, num_axes, default):
    """Resolve a repeated field (0, 1 or num_axes values) or its _h/_w pair to num_axes ints."""
    given_h, given_w = h_w
    if given_h is not None or given_w is not None:
        if num_axes != 2:
            raise layer_error(layer_name, f"{what}_h / {what}_w can only be used for 2-d "
                                          f"windows, not {num_axes}-d")
        if len(values):
            raise layer_error(layer_name, f"either {what}_size/{what} or {what}_h and "
                                          f"{what}_w should be specified, not both")
        if default is None and (given_h is None or given_w is None):
            raise layer_error(layer_name, f"{what}_h and {what}_w must be given together")
        return tuple(default if v is None else int(v) for v in (given_h, given_w))
    if len(values) == 0:
        if default is None:
            raise layer_error(layer_name, f"{what} size must be specified")
        return (default,) * num_axes
    if len(values) not in (1, num_axes):
        raise layer_error(layer_name, f"{what} must be given once or once per spatial axis "
                                      f"({num_axes}), got {len(values)} values")
    values = [int(v) for v in values]
    return tuple(values * num_axes if len(values) == 1 else values)


def _pair(param, name):
    return tuple(getattr(param, f"{name}_{s}") if param.HasField(f"{name}_{s}") else None
                 for s in ("h", "w"))


def conv_geometry(param, num_axes, layer_name):
    """(kernel, pad, stride, dilation) tuples from a ConvolutionParameter, as Caffe reads them.

    ``kernel_size``/``pad``/``stride``/``dilation`` hold 1 or ``num_axes`` values; the 2-d
    ``kernel_h``/``kernel_w`` style fields are the alternative. Kernel and stride must be > 0.
    """
    kernel = _axis_values(layer_name, "kernel", param.kernel_size, _pair(param, "kernel"),
                          num_axes, None)
    pad = _axis_values(layer_name, "pad", param.pad, _pair(param, "pad"), num_axes, 0)
    stride = _axis_values(layer_name, "stride", param.stride, _pair(param, "stride"),
                          num_axes, 1)
    dilation = _axis_values(layer_name, "dilation", param.dilation, (None, None), num_axes, 1)
    _check_positive(layer_name, "kernel", kernel)
    _check_positive(layer_name, "stride", stride)
    _check_positive(layer_name, "dilation", dilation)
    return kernel, pad, stride, dilation


def pool_geometry(param, height, width, layer_name):
    """(kernel, pad, stride) (h, w) pairs from a PoolingParameter for an input of that size.

    global_pooling makes the kernel the whole input with no padding and stride 1.
    """
    singles = lambda name: [getattr(param, name)] if param.HasField(name) else []  # noqa: E731
    if param.global_pooling:
        if param.HasField("kernel_size") or param.HasField("kernel_h"):
            raise layer_error(layer_name, "with global_pooling: true, filter size cannot be "
                                          "specified")
        kernel = (height, width)
    else:
        kernel = _axis_values(layer_name, "kernel", singles("kernel_size"),
                              _pair(param, "kernel"), 2, None)
    pad = _axis_values(layer_name, "pad", singles("pad"), _pair(param, "pad"), 2, 0)
    stride = _axis_values(layer_name, "stride", singles("stride"), _pair(param, "stride"), 2,
                          1)
    if param.global_pooling and (pad != (0, 0) or stride != (1, 1)):
        raise layer_error(layer_name, "with global_pooling: true, only pad = 0 and stride = 1 "
                                      "are allowed")
    _check_positive(layer_name, "kernel", kernel)
    _check_positive(layer_name, "stride", stride)
    if any(p >= k for p, k in zip(pad, kernel)):
        raise layer_error(layer_name, f"pad {pad} must be smaller than kernel {kernel}")
    return kernel, pad, stride


def _check_positive(layer_name, what, values):
    if any(v <= 0 for v in values):
        raise layer_error(layer_name, f"{what} dimensions must be positive, got {values}")
