"""Upgrading deprecated net and solver definitions (Caffe's util/upgrade_proto.cpp).

``upgrade_net`` applies, in Caffe's order and with Caffe's log lines:
V0 -> V1 layers (upgrade_v0.py), data-transformation fields -> ``transform_param``,
V1 ``layers`` -> current ``layer``, net ``input`` fields -> an ``Input`` layer, and the
BatchNorm ``param`` fix-up. ``upgrade_solver`` turns the ``solver_type`` enum into ``type``.
Where Caffe would silently drop definitions (mixed formats) we raise CaffeError instead.
"""
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.upgrade_v0 import net_needs_v0_upgrade, upgrade_v0_net
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2

V1 = caffe_pb2.V1LayerParameter

# Every V1 LayerType and its current type string (Caffe's UpgradeV1LayerType).
V1_LAYER_TYPES = {
    V1.ABSVAL: "AbsVal", V1.ACCURACY: "Accuracy", V1.ARGMAX: "ArgMax", V1.BNLL: "BNLL",
    V1.CONCAT: "Concat", V1.CONTRASTIVE_LOSS: "ContrastiveLoss", V1.CONVOLUTION: "Convolution",
    V1.DECONVOLUTION: "Deconvolution", V1.DATA: "Data", V1.DROPOUT: "Dropout",
    V1.DUMMY_DATA: "DummyData", V1.EUCLIDEAN_LOSS: "EuclideanLoss", V1.ELTWISE: "Eltwise",
    V1.EXP: "Exp", V1.FLATTEN: "Flatten", V1.HDF5_DATA: "HDF5Data",
    V1.HDF5_OUTPUT: "HDF5Output", V1.HINGE_LOSS: "HingeLoss", V1.IM2COL: "Im2col",
    V1.IMAGE_DATA: "ImageData", V1.INFOGAIN_LOSS: "InfogainLoss",
    V1.INNER_PRODUCT: "InnerProduct", V1.LRN: "LRN", V1.MEMORY_DATA: "MemoryData",
    V1.MULTINOMIAL_LOGISTIC_LOSS: "MultinomialLogisticLoss", V1.MVN: "MVN",
    V1.POOLING: "Pooling", V1.POWER: "Power", V1.RELU: "ReLU", V1.SIGMOID: "Sigmoid",
    V1.SIGMOID_CROSS_ENTROPY_LOSS: "SigmoidCrossEntropyLoss", V1.SILENCE: "Silence",
    V1.SOFTMAX: "Softmax", V1.SOFTMAX_LOSS: "SoftmaxWithLoss", V1.SPLIT: "Split",
    V1.SLICE: "Slice", V1.TANH: "TanH", V1.WINDOW_DATA: "WindowData",
    V1.THRESHOLD: "Threshold",
}

# V1 data layer types whose own params once carried the transformation fields.
_DATA_TRANSFORM_PARAMS = {V1.DATA: "data_param", V1.IMAGE_DATA: "image_data_param",
                          V1.WINDOW_DATA: "window_data_param"}
_TRANSFORM_FIELDS = ("scale", "mean_file", "crop_size", "mirror")

_SOLVER_TYPES = {
    caffe_pb2.SolverParameter.SGD: "SGD", caffe_pb2.SolverParameter.NESTEROV: "Nesterov",
    caffe_pb2.SolverParameter.ADAGRAD: "AdaGrad", caffe_pb2.SolverParameter.RMSPROP: "RMSProp",
    caffe_pb2.SolverParameter.ADADELTA: "AdaDelta", caffe_pb2.SolverParameter.ADAM: "Adam",
}


def upgrade_v1_layer_type(v1_type):
    """The current type string for a V1 LayerType enum value ("" for NONE)."""
    if v1_type == V1.NONE:
        return ""
    return V1_LAYER_TYPES[v1_type]


# --- checks ------------------------------------------------------------------------------
def net_needs_data_upgrade(param):
    """True when a V1 data layer keeps scale/mean_file/crop_size/mirror in its own params."""
    for entry in param.layers:
        field = _DATA_TRANSFORM_PARAMS.get(entry.type)
        if field and any(getattr(entry, field).HasField(name) for name in _TRANSFORM_FIELDS):
            return True
    return False


def net_needs_v1_upgrade(param):
    return len(param.layers) > 0


def net_needs_input_upgrade(param):
    return len(param.input) > 0


def net_needs_batch_norm_upgrade(param):
    """True for BatchNorm layers that still declare their three statistics ``param`` specs."""
    return any(layer.type == "BatchNorm" and len(layer.param) == 3 for layer in param.layer)


def net_needs_upgrade(param):
    """True when ``upgrade_net`` would change anything."""
    return (net_needs_v0_upgrade(param) or net_needs_data_upgrade(param)
            or net_needs_v1_upgrade(param) or net_needs_input_upgrade(param)
            or net_needs_batch_norm_upgrade(param))


# --- the steps -----------------------------------------------------------------------------
def upgrade_net_data_transformation(param):
    """Move V1 data layers' transformation fields into ``transform_param`` (in place)."""
    for entry in param.layers:
        field = _DATA_TRANSFORM_PARAMS.get(entry.type)
        if not field:
            continue
        data_param = getattr(entry, field)
        for name in _TRANSFORM_FIELDS:
            if data_param.HasField(name):
                setattr(entry.transform_param, name, getattr(data_param, name))
                data_param.ClearField(name)


def upgrade_v1_layer(v1_layer, index=0):
    """One V1LayerParameter as a current LayerParameter (Caffe's UpgradeV1LayerParameter)."""
    layer = caffe_pb2.LayerParameter()
    layer.bottom.extend(v1_layer.bottom)
    layer.top.extend(v1_layer.top)
    if v1_layer.HasField("name"):
        layer.name = v1_layer.name
    layer.include.extend(v1_layer.include)
    layer.exclude.extend(v1_layer.exclude)
    if v1_layer.HasField("type"):
        if v1_layer.type == V1.NONE:
            raise CaffeError(f'layer "{v1_layer.name or f"#{index}"}": V1 layer type NONE has '
                             "no current equivalent", layer=v1_layer.name or None)
        layer.type = upgrade_v1_layer_type(v1_layer.type)
    layer.blobs.extend(v1_layer.blobs)
    _upgrade_param_specs(v1_layer, layer)
    layer.loss_weight.extend(v1_layer.loss_weight)
    for field, value in v1_layer.ListFields():
        if field.name.endswith("_param"):
            getattr(layer, field.name).CopyFrom(value)
    if v1_layer.HasField("layer"):
        raise CaffeError(f'layer "{v1_layer.name or f"#{index}"}": has both a V1 definition '
                         "and an embedded V0 'layer' definition", layer=v1_layer.name or None)
    return layer


def _upgrade_param_specs(v1_layer, layer):
    """param names, blob_share_mode, blobs_lr, weight_decay -> ``param { ... }`` specs."""
    def spec(i):
        while len(layer.param) <= i:
            layer.param.add()
        return layer.param[i]

    for i, name in enumerate(v1_layer.param):
        spec(i).name = name
    for i, mode in enumerate(v1_layer.blob_share_mode):
        spec(i).share_mode = caffe_pb2.ParamSpec.DimCheckMode.Value(
            V1.DimCheckMode.Name(mode))
    for i, lr in enumerate(v1_layer.blobs_lr):
        spec(i).lr_mult = lr
    for i, decay in enumerate(v1_layer.weight_decay):
        spec(i).decay_mult = decay


def upgrade_v1_net(param):
    """A copy of ``param`` with its V1 ``layers`` rewritten as ``layer`` entries."""
    if param.layer:
        raise CaffeError("the net has both current 'layer' and deprecated V1 'layers' "
                         "definitions; Caffe would ignore the 'layer' ones. Write every layer "
                         "in one format")
    result = caffe_pb2.NetParameter()
    result.CopyFrom(param)
    del result.layers[:]
    for index, v1_layer in enumerate(param.layers):
        result.layer.add().CopyFrom(upgrade_v1_layer(v1_layer, index))
    return result


def upgrade_net_input(param):
    """Turn net-level ``input``/``input_shape``/``input_dim`` into a leading Input layer.

    A net with inputs but no shapes (an old .caffemodel) only loses its ``input`` fields.
    """
    inputs = list(param.input)
    has_shape, has_dim = len(param.input_shape) > 0, len(param.input_dim) > 0
    if has_shape or has_dim:
        if has_shape and len(param.input_shape) != len(inputs):
            raise CaffeError(f"the net declares {len(inputs)} input(s) but "
                             f"{len(param.input_shape)} input_shape(s); give one per input")
        if not has_shape and len(param.input_dim) != 4 * len(inputs):
            raise CaffeError(f"the net declares {len(inputs)} input(s) but "
                             f"{len(param.input_dim)} input_dim values; give four (num, "
                             "channels, height, width) per input")
        input_layer = caffe_pb2.LayerParameter(name="input", type="Input")
        input_layer.top.extend(inputs)
        for i in range(len(inputs)):
            shape = input_layer.input_param.shape.add()
            if has_shape:
                shape.CopyFrom(param.input_shape[i])
            else:
                shape.dim.extend(param.input_dim[4 * i:4 * i + 4])
        others = list(param.layer)
        del param.layer[:]
        param.layer.add().CopyFrom(input_layer)
        param.layer.extend(others)
    param.ClearField("input")
    param.ClearField("input_shape")
    param.ClearField("input_dim")


def upgrade_net_batch_norm(param):
    """Old BatchNorm layers declared three ``param`` specs; zero their lr and decay.

    BVLC Caffe (since PR #5184) keeps the specs, and with them any ``name`` used for
    sharing, and only forces ``lr_mult`` and ``decay_mult`` to 0.
    """
    for layer in param.layer:
        if layer.type == "BatchNorm" and len(layer.param) == 3:
            for spec in layer.param:
                spec.lr_mult = 0.0
                spec.decay_mult = 0.0


# --- entry points ----------------------------------------------------------------------------
def upgrade_net(param, source=""):
    """Upgrade a NetParameter to the current format, logging each step as Caffe does.

    Args:
        param: a NetParameter as read from a prototxt or .caffemodel. It is not modified.
        source: the file it came from, for the log lines.

    Returns:
        ``param`` itself when it is already current, else an upgraded copy.

    Raises:
        CaffeError: the definition cannot be upgraded (an unknown V0 type, formats mixed so
            that layers would be lost, a V1 type with no current equivalent, bad inputs).
    """
    if not net_needs_upgrade(param):
        return param
    current = caffe_pb2.NetParameter()
    current.CopyFrom(param)
    if net_needs_v0_upgrade(current):
        current = _run_v0_upgrade(current, source)
    if net_needs_data_upgrade(current):
        LOG.info("Attempting to upgrade input file specified using deprecated "
                 f"transformation parameters: {source}")
        upgrade_net_data_transformation(current)
        LOG.info("Successfully upgraded file specified using deprecated data transformation "
                 "parameters.")
        LOG.warning("Note that future Caffe releases will only support transform_param "
                    "messages for transformation fields.")
    if net_needs_v1_upgrade(current):
        LOG.info("Attempting to upgrade input file specified using deprecated "
                 f"V1LayerParameter: {source}")
        current = upgrade_v1_net(current)
        LOG.info("Successfully upgraded file specified using deprecated V1LayerParameter")
    if net_needs_input_upgrade(current):
        LOG.info("Attempting to upgrade input file specified using deprecated input fields: "
                 f"{source}")
        upgrade_net_input(current)
        LOG.info("Successfully upgraded file specified using deprecated input fields.")
        LOG.warning("Note that future Caffe releases will only support input layers and not "
                    "input fields.")
    if net_needs_batch_norm_upgrade(current):
        LOG.info(f"Attempting to upgrade batch norm layers using deprecated params: {source}")
        upgrade_net_batch_norm(current)
        LOG.info("Successfully upgraded batch norm layers using deprecated params.")
    return current


def _run_v0_upgrade(param, source):
    LOG.info("Attempting to upgrade input file specified using deprecated V0LayerParameter: "
             f"{source}")
    upgraded, compatible = upgrade_v0_net(param)
    if compatible:
        LOG.info("Successfully upgraded file specified using deprecated V0LayerParameter")
    else:
        LOG.error("Warning: had one or more problems upgrading V0NetParameter to "
                  "NetParameter (see above); continuing anyway.")
    LOG.warning("Note that future Caffe releases will not support V0NetParameter; use "
                "./build/tools/upgrade_net_proto_text for prototxt and "
                "./build/tools/upgrade_net_proto_binary for model weights upgrade this and "
                "any other net protos to the new format.")
    return upgraded


def upgrade_solver(param, source=""):
    """Replace the deprecated ``solver_type`` enum by the ``type`` string.

    Returns ``param`` itself when it has no ``solver_type``, else an upgraded copy.

    Raises:
        CaffeError: both ``solver_type`` and a different ``type`` are given.
    """
    if not param.HasField("solver_type"):
        return param
    LOG.info("Attempting to upgrade input file specified using deprecated 'solver_type' "
             f"field (enum)': {source}")
    type_name = _SOLVER_TYPES[param.solver_type]
    if param.HasField("type") and param.type != type_name:
        raise CaffeError(f"{source or 'solver'}: solver_type "
                         f"{caffe_pb2.SolverParameter.SolverType.Name(param.solver_type)} and "
                         f'type "{param.type}" disagree; give only type')
    current = caffe_pb2.SolverParameter()
    current.CopyFrom(param)
    current.type = type_name
    current.ClearField("solver_type")
    LOG.info("Successfully upgraded file specified using deprecated 'solver_type' field "
             "(enum) to 'type' field (string).")
    LOG.warning("Note that future Caffe releases will only support 'type' field (string) for "
                "a solver's type.")
    return current
