"""Chains the inference plan runs as one layer: a convolution (or inner product) and the
per-channel affine layers and ReLU after it; such affine layers and ReLU after no producer;
an Eltwise layer and the ReLU after it.

A chain starts at a producer P (Convolution, Deconvolution or InnerProduct with one bottom
and one top) and takes the layers that read P's output next, each the first reader of what
the one before it wrote: any number of BatchNorm (global statistics), Scale and Bias layers
with learned per-channel (or scalar) operands, then, in CPU mode, one ReLU. A link that is
not in place must be the only reader of its bottom, and that bottom must not be a blob the
caller keeps (or an output): the chain skips it. Each affine link maps channel c as
``y = a[c] x + b[c]``::

    BatchNorm:  a = 1 / sqrt(var + eps), b = -mean a   (mean = blobs[0] / sf, var = blobs[1] / sf,
                                                        sf = blobs[2]; 0 when sf is 0)
    Scale:      a = s, b = beta (bias_term) or 0
    Bias:       a = 1, b = beta

so the whole affine part is one (a, b), and P followed by it is P with weights scaled per
output channel, ``w' = w a[c]``, and bias ``b' = a b_P + b`` (b_P = 0 without a bias),
computed in float64 from the float32 blobs and stored as float32. The chain runs as ONE new
layer of P's type built through the registry (P's LayerParameter with bias_term: true) that
writes the chain's last blob directly; a fused ReLU is applied where that layer adds its
bias (its inference hooks' ``fuse_relu``). A chain with a ReLU and no affine link keeps P's
own weight blobs (P needs a bias then); a folded one has its own, recomputed whenever the
blobs they come from change (``Chain.stale``). The net's layers and params are never
modified.

A standalone chain starts at an affine link that follows no producer (a BatchNorm after an
Eltwise sum, or on the input; channels on axis 1) and takes the links and ReLU after it on
the same terms. It runs as one Scale layer (bias_term: true) whose scale and bias are the
folded (a, b), one pass over the data instead of one a link (BatchNorm's own takes three),
the ReLU fused as it writes (layers/kernels/cpu/channel_affine.py). A lone Scale or Bias
stays as it is: it has nothing to merge.

An Eltwise chain (CPU mode) is an Eltwise layer with one top and the ReLU that reads it next,
on the same terms: it runs as a new Eltwise layer that applies the ReLU to each element as it
writes it (ResNet's sum-then-ReLU, one pass over the data instead of two). Nothing folds into
an Eltwise layer.
"""
from dataclasses import dataclass, field

import numpy as np

from pycaffe_cli.blob import Blob
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.synced_memory import data_stamps

# Producer type -> the LayerParameter field holding num_output, axis and bias_term.
PRODUCER_FIELDS = {"Convolution": "convolution_param", "Deconvolution": "convolution_param",
                   "InnerProduct": "inner_product_param"}


@dataclass(slots=True, eq=False)
class Chain:
    """A producer and the links folded or fused into it (layer indices in the net), the blob
    the chain ends in, and the blobs it skips (written and read only inside it)."""
    producer: int
    axis: int
    channels: int
    takes_affine: bool = True
    affine: list = field(default_factory=list)
    relu: int = None
    top_id: int = -1
    skipped: list = field(default_factory=list)
    layer: object = None
    standalone: bool = False  # the producer is itself an affine link (see find_chains)
    sources: list = field(default_factory=list)
    stamps: tuple = ()

    def stale(self):
        """Whether a blob the folded weights come from was written, or uses other memory,
        since they were computed (``data_stamps``)."""
        return data_stamps(self.sources) != self.stamps


def _canonical(axis, num_axes):
    return axis + num_axes if axis < 0 else axis


def _one_top(entry):
    return len(entry.tops) == 1 and not any(entry.layer.loss_weights)


def _single(entry):
    return len(entry.bottoms) == 1 and _one_top(entry)


# --- which links fold --------------------------------------------------------------------
def _batch_norm_folds(entry, axis, channels):
    layer = entry.layer
    p = layer.param.batch_norm_param
    global_stats = (p.use_global_stats if p.HasField("use_global_stats")
                    else layer.phase == caffe_pb2.TEST)
    return global_stats and axis == 1 and entry.tops[0].num_axes >= 2


def _operand_folds(operand, axis_param, entry, axis, channels):
    """A learned Scale/Bias operand covers channel axis ``axis`` exactly, or is a scalar."""
    if operand.num_axes == 0:
        return True
    return (operand.shape == (channels,)
            and _canonical(axis_param, entry.tops[0].num_axes) == axis)


def _scale_folds(entry, axis, channels):
    layer = entry.layer
    return _operand_folds(layer.blobs[0], layer.param.scale_param.axis, entry, axis, channels)


def _bias_folds(entry, axis, channels):
    layer = entry.layer
    return _operand_folds(layer.blobs[0], layer.param.bias_param.axis, entry, axis, channels)


# --- what they compute: (a, b) per channel, float64 ------------------------------------------
def _values(blob, channels):
    values = np.asarray(blob.cpu_data, np.float64).ravel()
    return np.full(channels, values[0]) if values.size == 1 else values


def _batch_norm_affine(layer, channels):
    factor = np.float64(layer.blobs[2].cpu_data.ravel()[0])
    scale = 0.0 if factor == 0 else 1.0 / factor
    mean = _values(layer.blobs[0], channels) * scale
    var = _values(layer.blobs[1], channels) * scale
    a = 1.0 / np.sqrt(var + np.float64(np.float32(layer.param.batch_norm_param.eps)))
    return a, -mean * a


def _scale_affine(layer, channels):
    a = _values(layer.blobs[0], channels)
    b = _values(layer.blobs[1], channels) if len(layer.blobs) > 1 else np.zeros(channels)
    return a, b


def _bias_affine(layer, channels):
    return np.ones(channels), _values(layer.blobs[0], channels)


AFFINE = {"BatchNorm": (_batch_norm_folds, _batch_norm_affine),
          "Scale": (_scale_folds, _scale_affine),
          "Bias": (_bias_folds, _bias_affine)}


# --- finding chains ------------------------------------------------------------------------
def find_chains(net, protected, fuse_relu):
    """Every chain of ``net`` worth running as one layer: with an affine link, or with a ReLU
    to fuse (``fuse_relu``) into a producer that has a bias or into an Eltwise layer.
    ``protected``: blob ids that must keep their own values (kept blobs, outputs)."""
    readers = {}
    for index, entry in enumerate(net.layer_entries):
        for blob_id in entry.bottom_ids:
            readers.setdefault(blob_id, []).append(index)
    chains = []
    for index, entry in enumerate(net.layer_entries):
        if entry.layer.type == "Eltwise" and fuse_relu and _one_top(entry):
            chain = Chain(index, axis=-1, channels=0, takes_affine=False)
            _follow(net, readers, chain, protected, fuse_relu)
            if chain.relu is not None:
                chains.append(chain)
            continue
        field_name = PRODUCER_FIELDS.get(entry.layer.type)
        if field_name is None or not _single(entry):
            continue
        p = getattr(entry.layer.param, field_name)
        chain = Chain(index, _canonical(p.axis, entry.bottoms[0].num_axes), p.num_output)
        _follow(net, readers, chain, protected, fuse_relu)
        if chain.affine or (chain.relu is not None and p.bias_term):
            chains.append(chain)
    return chains + _standalone_chains(net, readers, chains, protected, fuse_relu)


def _standalone_chains(net, readers, chains, protected, fuse_relu):
    """Chains of affine links that follow no producer (a BatchNorm after an Eltwise sum or
    on the input): each runs as one Scale layer with the folded (a, b), in one pass instead
    of one a link (and with the ReLU after them fused), where there is more than one link
    or a ReLU, or the first is a BatchNorm (whose own pass takes three)."""
    taken = {i for chain in chains
             for i in [chain.producer] + chain.affine + [chain.relu] if i is not None}
    standalone = []
    for index, entry in enumerate(net.layer_entries):
        rules = AFFINE.get(entry.layer.type)
        if index in taken or rules is None or not _single(entry) or entry.tops[0].num_axes < 2:
            continue
        channels = entry.tops[0].shape[1]
        if not rules[0](entry, 1, channels):
            continue
        chain = Chain(index, axis=1, channels=channels, affine=[index], standalone=True)
        _follow(net, readers, chain, protected, fuse_relu)
        if len(chain.affine) > 1 or chain.relu is not None or entry.layer.type == "BatchNorm":
            standalone.append(chain)
            taken.update(chain.affine + ([chain.relu] if chain.relu is not None else []))
    return standalone


def _follow(net, readers, chain, protected, fuse_relu):
    entries = net.layer_entries
    blob, position = entries[chain.producer].top_ids[0], chain.producer
    chain.top_id = blob
    while chain.relu is None:
        later = [i for i in readers.get(blob, ()) if i > position]
        if not later or not _single(entries[later[0]]):
            return
        link = entries[later[0]]
        kind = _link_kind(link, chain, fuse_relu)
        in_place = link.top_ids[0] == blob
        if kind is None or (not in_place and (blob in protected or len(later) > 1)):
            return
        if not in_place:
            chain.skipped.append(blob)
        if kind == "relu":
            chain.relu = later[0]
        else:
            chain.affine.append(later[0])
        blob, position = link.top_ids[0], later[0]
        chain.top_id = blob


def _link_kind(entry, chain, fuse_relu):
    layer_type = entry.layer.type
    if layer_type == "ReLU":
        return "relu" if fuse_relu else None
    rules = AFFINE.get(layer_type) if chain.takes_affine else None
    if rules is not None and rules[0](entry, chain.axis, chain.channels):
        return "affine"
    return None


# --- the chain's layer -----------------------------------------------------------------------
def make_layer(net, chain):
    """Build the chain's layer (P's type; a convolution or inner product with bias_term:
    true) on P's bottoms and the chain's top blob, with folded weights or P's own; set its
    fused ReLU."""
    entry = net.layer_entries[chain.producer]
    producer = entry.layer
    param = caffe_pb2.LayerParameter()
    if chain.standalone:
        param.name, param.type = producer.name, "Scale"
        param.scale_param.axis, param.scale_param.bias_term = chain.axis, True
    else:
        param.CopyFrom(producer.param)
        del param.blobs[:]
    if producer.type in PRODUCER_FIELDS:
        getattr(param, PRODUCER_FIELDS[producer.type]).bias_term = True
    layer = create_layer(param)
    links = [blob for i in chain.affine for blob in net.layer_entries[i].layer.blobs]
    if chain.standalone:
        layer.blobs = [Blob((chain.channels,)), Blob((chain.channels,))]
        chain.sources = links
    elif chain.affine:
        layer.blobs = [Blob(producer.blobs[0].shape), Blob((chain.channels,))]
        chain.sources = list(producer.blobs) + links
    else:
        layer.blobs = list(producer.blobs)  # the net's own weight and bias blobs (if any)
    layer.setup(entry.bottoms, [net.blob_entries[chain.top_id].blob])
    if chain.relu is not None:
        relu = net.layer_entries[chain.relu].layer
        layer.inference().fuse_relu(float(np.float32(relu.param.relu_param.negative_slope)))
    chain.layer = layer
    fold(net, chain)
    return layer


def fold(net, chain):
    """(Re)compute the chain layer's weights and bias from the blobs they come from."""
    if not chain.affine:
        return
    a, b = np.ones(chain.channels), np.zeros(chain.channels)
    for index in chain.affine:
        layer = net.layer_entries[index].layer
        link_a, link_b = AFFINE[layer.type][1](layer, chain.channels)
        a, b = link_a * a, link_a * b + link_b
    layer = chain.layer
    if chain.standalone:
        layer.blobs[0].data[...] = a
        layer.blobs[1].data[...] = b
        chain.stamps = data_stamps(chain.sources)
        return
    producer = net.layer_entries[chain.producer].layer
    weights = np.asarray(producer.blobs[0].cpu_data, np.float64)
    bias = (np.asarray(producer.blobs[1].cpu_data, np.float64).ravel()
            if len(producer.blobs) > 1 else np.zeros(chain.channels))
    layer.blobs[0].data[...] = _scaled_weights(producer, weights, a)
    layer.blobs[1].data[...] = (a * bias + b).reshape(layer.blobs[1].shape)
    chain.stamps = data_stamps(chain.sources)


def _scaled_weights(producer, weights, a):
    """``weights`` with each output channel's slice times a[channel]."""
    shape = weights.shape
    if producer.type == "Convolution":
        return weights * a.reshape((-1,) + (1,) * (len(shape) - 1))
    if producer.type == "Deconvolution":  # (C_in, C_out / G, ...): output channels on axis 1
        group = producer.param.convolution_param.group
        grouped = weights.reshape(group, shape[0] // group, shape[1], -1)
        return (grouped * a.reshape(group, 1, shape[1], 1)).reshape(shape)
    if producer.param.inner_product_param.transpose:  # (K, N)
        return (weights.reshape(-1, a.size) * a[None, :]).reshape(shape)
    return (weights.reshape(a.size, -1) * a[:, None]).reshape(shape)
