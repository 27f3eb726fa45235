"""Summing the ranks' gradients, started while backward still runs (Caffe's NCCL callback).

Caffe's multi-GPU semantics (parallel.cpp, ``NCCL::run`` and ``NCCL::on_gradients_ready``):
after backward, every learnable param's diff is summed over the N ranks and scaled by 1/N,
all before the solver's update, which then clips, normalizes (iter_size), regularizes and
applies its rule to the averaged gradient on every rank alike. The loss layers divide by
their own batch, so N ranks at batch B step as one process at batch N*B.

``GradientReducer`` is a solver callback (``on_start``, ``on_gradients_ready``) as Caffe's
NCCL object is. With the solver's ``layer_wise_reduce`` (Caffe's default, true) it also
watches the net's per-layer ``after_backward`` callback: params are packed, in the order
backward finishes them, into buckets of at least ``bucket_bytes`` (so that a small bias does
not pay a message's latency alone), and a bucket's sum starts as soon as backward has passed
the first layer, in forward order, that uses any of its params: the sum of the last layers
travels while the first ones still compute. With iter_size > 1 only the last pass of the
iteration starts sums. Unlike Caffe's layer-wise path, shared weights are fine: a shared
param is ready after the first layer that uses it. Params with lr_mult 0 are not summed
(their step is 0 whatever the gradient). With ``layer_wise_reduce: false`` everything is one
bucket, summed in ``on_gradients_ready``.
"""
from dataclasses import dataclass, field

import numpy as np

from pycaffe_cli.sizes import FLOAT_BYTES

DEFAULT_BUCKET_BYTES = 4 << 20


@dataclass(eq=False)
class Bucket:
    """Params summed together: ``params`` lists (blob, offset, count) in ``buffer``; the sum
    may start once backward has passed layer ``ready_layer``."""
    ready_layer: int
    params: list = field(default_factory=list)
    size: int = 0
    buffer: object = None
    handle: object = None
    started: bool = False


def param_ready_layers(net):
    """{learnable param id: the lowest index of a layer using it} (backward is done with a
    param once it has passed that layer)."""
    ready = {}
    for entry in net.param_entries:
        current = ready.get(entry.learnable_id, entry.layer_id)
        ready[entry.learnable_id] = min(current, entry.layer_id)
    return ready


def plan_buckets(net, bucket_bytes=DEFAULT_BUCKET_BYTES):
    """Pack the net's learnable params (lr_mult != 0) into buckets, in backward order."""
    ready = param_ready_layers(net)
    learnables = net.learnable_entries
    order = sorted((i for i in ready if learnables[i].lr_mult != 0),
                   key=lambda i: (-ready[i], i))
    buckets, current = [], None
    for learnable_id in order:
        blob = learnables[learnable_id].blob
        if current is None:
            current = Bucket(ready[learnable_id])
            buckets.append(current)
        current.params.append((blob, current.size, blob.count()))
        current.size += blob.count()
        current.ready_layer = ready[learnable_id]
        if current.size * FLOAT_BYTES >= bucket_bytes:
            current = None
    return buckets


class GradientReducer:
    """Averages a net's gradients over ``comm``'s ranks each iteration (see module doc).

    Args:
        net: the train Net.
        comm: a Communicator.
        iter_size: the solver's iter_size (forward/backward passes per update).
        layer_wise: start sums during backward (the solver's layer_wise_reduce).
        bucket_bytes: the least size of a bucket, in bytes.
    """

    def __init__(self, net, comm, iter_size=1, layer_wise=True,
                 bucket_bytes=DEFAULT_BUCKET_BYTES):
        self.comm = comm
        self.iter_size = iter_size
        self.buckets = plan_buckets(net, bucket_bytes if layer_wise else float("inf"))
        self._by_layer = {}
        for bucket in self.buckets:
            self._by_layer.setdefault(bucket.ready_layer, []).append(bucket)
        self._passes_left = iter_size
        if layer_wise:
            net.add_callback("after_backward", self._after_backward)

    @property
    def count(self):
        """How many values are summed per iteration."""
        return sum(bucket.size for bucket in self.buckets)

    def on_start(self):
        self._passes_left = self.iter_size
        for bucket in self.buckets:
            bucket.started = False

    def _after_backward(self, layer_index):
        if self._passes_left == 1:
            for bucket in self._by_layer.get(layer_index, ()):
                self._start(bucket)
            for bucket in self.buckets:
                if bucket.started:
                    self.comm.allreduce_test(bucket.handle)   # lets MPI move it along
        if layer_index == 0:
            self._passes_left -= 1

    def _start(self, bucket):
        comm = self.comm
        if bucket.buffer is None:
            bucket.buffer = comm.empty(bucket.size)
        for blob, offset, count in bucket.params:
            bucket.buffer[offset:offset + count] = comm.diff_of(blob)
        bucket.handle = comm.allreduce_start(bucket.buffer)
        bucket.started = True

    def on_gradients_ready(self):
        """Finish every sum, scale by 1/N (in float32, as Caffe) and put it in the diffs."""
        comm = self.comm
        scale = np.float32(1.0) / np.float32(comm.size)
        for bucket in self.buckets:
            if not bucket.started:
                self._start(bucket)
        for bucket in self.buckets:
            comm.allreduce_wait(bucket.handle)
            bucket.buffer *= scale
            for blob, offset, count in bucket.params:
                comm.diff_of(blob)[:] = bucket.buffer[offset:offset + count]
            bucket.started, bucket.handle = False, None


def broadcast_weights(net, comm, root=0):
    """Give every rank ``root``'s learnable params (Caffe's NCCL::Broadcast, at the start)."""
    for entry in net.learnable_entries:
        if entry.blob.count():
            comm.bcast(comm.data_of(entry.blob), root)
