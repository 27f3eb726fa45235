"""V0 nets (``layers { layer { type: "conv" ... } }``) to V1 ``layers`` (Caffe's UpgradeV0Net).

Two steps, as in Caffe: V0 ``padding`` layers are folded into the ``pad`` of the conv or pool
layer they feed, then each V0 layer's flat fields are moved into the V1 layer's typed
``*_param`` messages. A field that has no home for the layer's type is dropped with an error
line in the log (Caffe continues "anyway"); an unknown V0 type cannot be upgraded at all.
"""
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2

V1 = caffe_pb2.V1LayerParameter

# V0 type string -> V1 LayerType enum (Caffe's UpgradeV0LayerType).
V0_LAYER_TYPES = {
    "accuracy": V1.ACCURACY, "bnll": V1.BNLL, "concat": V1.CONCAT, "conv": V1.CONVOLUTION,
    "data": V1.DATA, "dropout": V1.DROPOUT, "euclidean_loss": V1.EUCLIDEAN_LOSS,
    "flatten": V1.FLATTEN, "hdf5_data": V1.HDF5_DATA, "hdf5_output": V1.HDF5_OUTPUT,
    "im2col": V1.IM2COL, "images": V1.IMAGE_DATA, "infogain_loss": V1.INFOGAIN_LOSS,
    "innerproduct": V1.INNER_PRODUCT, "lrn": V1.LRN,
    "multinomial_logistic_loss": V1.MULTINOMIAL_LOGISTIC_LOSS, "pool": V1.POOLING,
    "relu": V1.RELU, "sigmoid": V1.SIGMOID, "softmax": V1.SOFTMAX,
    "softmax_loss": V1.SOFTMAX_LOSS, "split": V1.SPLIT, "tanh": V1.TANH,
    "window_data": V1.WINDOW_DATA,
}

_ANY_TYPE = "*"

# V0 field -> {V0 type -> "v1_param_field.field"}; _ANY_TYPE applies to every type.
# Repeated targets are appended to, message targets copied, enums mapped by value name.
V0_FIELD_MOVES = {
    "num_output": {"conv": "convolution_param.num_output",
                   "innerproduct": "inner_product_param.num_output"},
    "biasterm": {"conv": "convolution_param.bias_term",
                 "innerproduct": "inner_product_param.bias_term"},
    "weight_filler": {"conv": "convolution_param.weight_filler",
                      "innerproduct": "inner_product_param.weight_filler"},
    "bias_filler": {"conv": "convolution_param.bias_filler",
                    "innerproduct": "inner_product_param.bias_filler"},
    "pad": {"conv": "convolution_param.pad", "pool": "pooling_param.pad"},
    "kernelsize": {"conv": "convolution_param.kernel_size", "pool": "pooling_param.kernel_size"},
    "group": {"conv": "convolution_param.group"},
    "stride": {"conv": "convolution_param.stride", "pool": "pooling_param.stride"},
    "pool": {"pool": "pooling_param.pool"},
    "dropout_ratio": {"dropout": "dropout_param.dropout_ratio"},
    "local_size": {"lrn": "lrn_param.local_size"},
    "alpha": {"lrn": "lrn_param.alpha"},
    "beta": {"lrn": "lrn_param.beta"},
    "k": {"lrn": "lrn_param.k"},
    "source": {"data": "data_param.source", "hdf5_data": "hdf5_data_param.source",
               "images": "image_data_param.source", "window_data": "window_data_param.source",
               "infogain_loss": "infogain_loss_param.source"},
    "scale": {_ANY_TYPE: "transform_param.scale"},
    "meanfile": {_ANY_TYPE: "transform_param.mean_file"},
    "batchsize": {"data": "data_param.batch_size", "hdf5_data": "hdf5_data_param.batch_size",
                  "images": "image_data_param.batch_size",
                  "window_data": "window_data_param.batch_size"},
    "cropsize": {_ANY_TYPE: "transform_param.crop_size"},
    "mirror": {_ANY_TYPE: "transform_param.mirror"},
    "rand_skip": {"data": "data_param.rand_skip", "images": "image_data_param.rand_skip"},
    "shuffle_images": {"images": "image_data_param.shuffle"},
    "new_height": {"images": "image_data_param.new_height"},
    "new_width": {"images": "image_data_param.new_width"},
    "concat_dim": {"concat": "concat_param.concat_dim"},
    "det_fg_threshold": {"window_data": "window_data_param.fg_threshold"},
    "det_bg_threshold": {"window_data": "window_data_param.bg_threshold"},
    "det_fg_fraction": {"window_data": "window_data_param.fg_fraction"},
    "det_context_pad": {"window_data": "window_data_param.context_pad"},
    "det_crop_mode": {"window_data": "window_data_param.crop_mode"},
    "hdf5_output_param": {"hdf5_output": "hdf5_output_param"},
}


def net_needs_v0_upgrade(param):
    """True when any ``layers`` entry carries a V0 ``layer`` definition."""
    return any(entry.HasField("layer") for entry in param.layers)


def _display_name(entry, index):
    name = entry.layer.name if entry.HasField("layer") else entry.name
    return name or f"#{index}"


def _check_not_mixed(param):
    """A V1 entry in a V0 net would lose everything but its bottoms and tops."""
    for index, entry in enumerate(param.layers):
        if not entry.HasField("layer") and (entry.name or entry.HasField("type")):
            raise CaffeError(
                f'layer "{_display_name(entry, index)}": V1 layer definition in a net that also '
                "has V0 'layers { layer { ... } }' definitions; write every layer in one "
                "format", layer=entry.name or None)


def upgrade_v0_padding_layers(param):
    """A copy of ``param`` with V0 ``padding`` layers folded into the conv/pool they feed."""
    result = caffe_pb2.NetParameter()
    result.CopyFrom(param)
    del result.layers[:]
    last_producer = {name: -1 for name in param.input}
    for index, entry in enumerate(param.layers):
        v0 = entry.layer
        if v0.type != "padding":
            result.layers.add().CopyFrom(entry)
        for j, blob_name in enumerate(entry.bottom):
            if blob_name not in last_producer:
                raise CaffeError(f'layer "{_display_name(entry, index)}": unknown bottom blob '
                                 f'"{blob_name}" (bottom index {j})', layer=v0.name or None)
            source_index = last_producer[blob_name]
            if source_index < 0:
                continue
            source = param.layers[source_index]
            if source.layer.type == "padding":
                _fold_padding(result.layers[-1], j, entry, source, index)
        for blob_name in entry.top:
            last_producer[blob_name] = index
    return result


def _fold_padding(target, bottom_index, entry, source, index):
    name = _display_name(entry, index)
    if entry.layer.type not in ("conv", "pool"):
        raise CaffeError(f'layer "{name}": a V0 padding layer feeds a layer of type '
                         f'"{entry.layer.type}"; only conv and pool layers can absorb padding',
                         layer=entry.layer.name or None)
    if len(entry.bottom) != 1:
        raise CaffeError(f'layer "{name}": a conv/pool layer fed by a padding layer must take '
                         "a single bottom", layer=entry.layer.name or None)
    if len(source.bottom) != 1 or len(source.top) != 1:
        raise CaffeError(f'layer "{source.layer.name}": a V0 padding layer must have exactly '
                         "one bottom and one top", layer=source.layer.name or None)
    target.layer.pad = source.layer.pad
    target.bottom[bottom_index] = source.bottom[0]


def _assign(v1_layer, target, value):
    """Store ``value`` at the dotted field path ``target`` under ``v1_layer``."""
    *parents, leaf = target.split(".")
    message = v1_layer
    for parent in parents:
        message = getattr(message, parent)
    field = message.DESCRIPTOR.fields_by_name[leaf]
    if field.message_type is not None:
        getattr(message, leaf).CopyFrom(value)
    elif field.is_repeated:
        getattr(message, leaf).append(value)
    elif field.enum_type is not None:
        source_enum = caffe_pb2.V0LayerParameter.PoolMethod
        setattr(message, leaf, field.enum_type.values_by_name[source_enum.Name(value)].number)
    else:
        setattr(message, leaf, value)


def upgrade_v0_layer(entry, index):
    """One V0 ``layers { layer {...} }`` entry as a V1LayerParameter.

    Returns:
        (v1_layer, fully_compatible): the second is False when a field had to be dropped.
    """
    v1_layer = caffe_pb2.V1LayerParameter()
    v1_layer.bottom.extend(entry.bottom)
    v1_layer.top.extend(entry.top)
    if not entry.HasField("layer"):
        return v1_layer, True
    v0 = entry.layer
    if v0.HasField("name"):
        v1_layer.name = v0.name
    if v0.HasField("type"):
        if v0.type not in V0_LAYER_TYPES:
            raise CaffeError(f'layer "{_display_name(entry, index)}": unknown V0 layer type '
                             f'"{v0.type}"; it cannot be upgraded', layer=v0.name or None)
        v1_layer.type = V0_LAYER_TYPES[v0.type]
    v1_layer.blobs.extend(v0.blobs)
    v1_layer.blobs_lr.extend(v0.blobs_lr)
    v1_layer.weight_decay.extend(v0.weight_decay)
    compatible = True
    for field, value in v0.ListFields():
        moves = V0_FIELD_MOVES.get(field.name)
        if moves is None:
            continue
        target = moves.get(v0.type, moves.get(_ANY_TYPE))
        if target is None:
            LOG.error(f"Unknown parameter {field.name} for layer type {v0.type}")
            compatible = False
            continue
        _assign(v1_layer, target, value)
    return v1_layer, compatible


def upgrade_v0_net(param):
    """Caffe's UpgradeV0Net: returns (V1-format NetParameter, fully_compatible)."""
    _check_not_mixed(param)
    padded = upgrade_v0_padding_layers(param)
    result = caffe_pb2.NetParameter()
    if padded.HasField("name"):
        result.name = padded.name
    compatible = True
    for index, entry in enumerate(padded.layers):
        v1_layer, ok = upgrade_v0_layer(entry, index)
        result.layers.add().CopyFrom(v1_layer)
        compatible &= ok
    result.input.extend(padded.input)
    result.input_dim.extend(padded.input_dim)
    if padded.HasField("force_backward"):
        result.force_backward = padded.force_backward
    return result, compatible
