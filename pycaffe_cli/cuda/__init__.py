"""The CUDA runtime (numba.cuda): what the engine and every layer's GPU path share.

* ``launch``: grid sizing and ``launch(kernel, n, ...)`` for grid-stride kernels.
* ``device``: ``device_function``, a plain-Python per-element body compiled for the device.
* ``memory``: device arrays (allocation, fill, copies, pinned buffers, streams).
* ``math``: Caffe's math_functions.cu (GEMM through cuBLAS or a fallback kernel, axpy, scal,
  float64 reductions).
* ``copy``: strided block copies and indexed row gathers between blobs.
* ``elementwise``: ``DeviceCopy`` (a layer's kept device buffer) and the ``sigmoid`` device
  function.
* ``views``: views of flat device arrays that skip slicing where it would change nothing.

Layer kernels that have a CPU twin in ``layers/kernels/cpu`` live in ``layers/kernels/cuda``
and import this package; nothing here imports ``pycaffe_cli.layers``. Importing this package
imports no CUDA: each module imports numba.cuda itself, and the engine imports them only in
GPU mode.
"""
