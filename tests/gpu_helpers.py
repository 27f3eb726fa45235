"""Run a layer in CPU mode and in GPU mode on the same inputs and compare everything.

The GPU run uses numba's CUDA simulator in CI (see conftest.py) and a real device where one is
present. ``compare_layer_modes`` is the one entry point most GPU layer tests need: it also
asserts that the layer really ran its GPU path (the tops were written on the device, not on
the host through the CPU fallback).
"""
import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.blob import Blob
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.synced_memory import Head
from tests.layer_helpers import blob_of, layer_param


NO_CUDA = "no CUDA device and the CUDA simulator is off"


# The ``device`` argument lists of CLI tests that run once on the CPU and once with --gpu 0.
DEVICES = [pytest.param([], id="cpu"), pytest.param(["-gpu", "0"], id="gpu", marks=pytest.mark.gpu)]


def skip_without_cuda():
    """Skip the calling test where GPU mode cannot run: NUMBA_ENABLE_CUDASIM=0 and no device."""
    if not backend.cuda_available():
        pytest.skip(NO_CUDA)


def _run(text, bottoms, num_tops, top_diffs, propagate_down, phase, params, gpu, seed=None):
    if seed is not None:
        backend.set_random_seed(seed)
    layer = create_layer(layer_param(text, phase))
    bottom = [blob_of(b) for b in bottoms]
    top = [Blob() for _ in range(num_tops)]
    if gpu:
        backend.set_mode_gpu(0)
    try:
        layer.setup(bottom, top)
        if params is not None:
            for blob, values in zip(layer.blobs, params):
                blob.data[...] = values
        params = [b.data.copy() for b in layer.blobs]
        for blob in layer.blobs:
            blob.diff[...] = 0
        layer.forward(bottom, top)
        heads = [t.data_memory.head for t in top]
        outputs = [t.cpu_data.copy() for t in top]
        grads = None
        if top_diffs is not None:
            for blob, diff in zip(top, top_diffs):
                blob.diff[...] = diff
            down = propagate_down or [True] * len(bottom)
            layer.backward(top, down, bottom)
            grads = [b.cpu_diff.copy() if d else None for b, d in zip(bottom, down)]
            grads += [b.cpu_diff.copy() for b in layer.blobs]
    finally:
        backend.set_mode_cpu()
    return layer, outputs, grads, params, heads


def compare_layer_modes(text, bottoms, num_tops=1, top_diffs=None, propagate_down=None,
                        phase=1, rtol=1e-5, atol=1e-6, params=None, check_device_tops=True,
                        seed=None):
    """Forward (and backward, when ``top_diffs`` is given) in both modes; assert equal results.

    Args:
        text: LayerParameter prototxt text.
        bottoms: list of arrays (float32 copies go into fresh blobs for each run).
        top_diffs: arrays to put in the tops' diffs before backward (None: forward only).
        propagate_down: per-bottom flags for backward (default all True).
        phase: caffe.Phase value (1 = TEST by default: no dropout-like randomness).
        params: values for the layer's learnable blobs (default: the CPU run's fillers').
        check_device_tops: assert the GPU forward wrote its tops on the device.
        seed: if given, ``backend.set_random_seed(seed)`` before each run (layers whose
            forward draws from backend.rng() on the host then draw the same numbers).

    Returns:
        (cpu outputs, gpu outputs, cpu grads, gpu grads); grads list bottom diffs (None where
        not propagated) then param diffs.
    """
    skip_without_cuda()
    _, cpu_out, cpu_grads, params, _ = _run(text, bottoms, num_tops, top_diffs,
                                             propagate_down, phase, params, gpu=False,
                                             seed=seed)
    layer, gpu_out, gpu_grads, _, heads = _run(text, bottoms, num_tops, top_diffs,
                                               propagate_down, phase, params, gpu=True,
                                               seed=seed)
    assert layer.forward_gpu is not None, f"{layer.type} has no forward_gpu"
    if check_device_tops:
        # AT_GPU: written on the device. SYNCED: written on the device, then read back by
        # forward's weighted loss (a loss top). A CPU fallback leaves AT_CPU.
        for index, head in enumerate(heads):
            assert head in (Head.AT_GPU, Head.SYNCED), \
                f"top {index} was not written on the device ({head})"
    for index, (want, got) in enumerate(zip(cpu_out, gpu_out)):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"top {index}")
    if top_diffs is not None:
        for index, (want, got) in enumerate(zip(cpu_grads, gpu_grads)):
            if want is None:
                continue
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol,
                                       err_msg=f"gradient {index}")
    return cpu_out, gpu_out, cpu_grads, gpu_grads


def engine_cases(cpu, gpu, unpack=False):
    """Parameter sets for a test that runs on both engines with cases of its own on each (the
    simulator is slow: the GPU case is often one smaller input), for
    ``@pytest.mark.parametrize("engine, shape", engine_cases(SHAPES, [(2, 3)]),
    indirect=["engine"])``. With ``unpack`` each case is a tuple of the values of several
    argument names."""
    return [pytest.param(engine, *(case if unpack else (case,)))
            for engine, cases in (("cpu", cpu), ("gpu", gpu)) for case in cases]


def assert_tops_on_device(layer, top):
    """For a test parametrised by ``engine``, right after ``layer.forward``: in GPU mode,
    assert what compare_layer_modes asserts of its GPU run (the layer has a GPU forward and
    wrote its tops on the device: AT_GPU, or SYNCED for a loss top that forward read back),
    not on the host through the CPU fallback. Does nothing in CPU mode. Call it before the
    test reads a top on the host (``top[i].data`` moves the head there)."""
    if backend.mode() is not backend.Mode.GPU:
        return
    assert layer.forward_gpu is not None, f"{layer.type} has no forward_gpu"
    for index, blob in enumerate(top):
        head = blob.data_memory.head
        assert head in (Head.AT_GPU, Head.SYNCED), \
            f"top {index} was not written on the device ({head})"
