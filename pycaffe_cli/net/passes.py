"""NetParameter-to-NetParameter passes that run before a Net is wired.

``filter_net`` keeps the layers whose include/exclude rules match the NetState (Caffe's
FilterNet); ``insert_splits`` adds a Split layer wherever one top feeds several bottoms (or a
bottom and an explicit loss), so every blob has exactly one consumer (Caffe's InsertSplits).
"""
from pycaffe_cli.errors import layer_error
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2


def state_meets_rule(state, rule, layer_name):
    """Whether a NetState satisfies one NetStateRule (phase, level range, stages)."""
    if rule.HasField("phase") and rule.phase != state.phase:
        LOG.info(f"The NetState phase ({state.phase}) differed from the phase ({rule.phase}) "
                 f"specified by a rule in layer {layer_name}")
        return False
    if rule.HasField("min_level") and state.level < rule.min_level:
        LOG.info(f"The NetState level ({state.level}) is below the min_level "
                 f"({rule.min_level}) specified by a rule in layer {layer_name}")
        return False
    if rule.HasField("max_level") and state.level > rule.max_level:
        LOG.info(f"The NetState level ({state.level}) is above the max_level "
                 f"({rule.max_level}) specified by a rule in layer {layer_name}")
        return False
    stages = set(state.stage)
    for stage in rule.stage:
        if stage not in stages:
            LOG.info(f"The NetState did not contain stage '{stage}' specified by a rule in "
                     f"layer {layer_name}")
            return False
    for stage in rule.not_stage:
        if stage in stages:
            LOG.info(f"The NetState contained a not_stage '{stage}' specified by a rule in "
                     f"layer {layer_name}")
            return False
    return True


def layer_included(state, layer):
    """Caffe's rule: no include rules means included unless an exclude rule matches."""
    if layer.include and layer.exclude:
        raise layer_error(layer.name, "specify either include rules or exclude rules, not both")
    if layer.include:
        return any(state_meets_rule(state, rule, layer.name) for rule in layer.include)
    return not any(state_meets_rule(state, rule, layer.name) for rule in layer.exclude)


def without_layers(param):
    """A copy of the NetParameter ``param`` without its layers. Copying everything and then
    deleting the layers would keep their memory (protobuf frees a message's memory only with
    the whole message): twice a huge net's size for each pass."""
    copy = caffe_pb2.NetParameter()
    for field, value in param.ListFields():
        if field.name == "layer":
            continue
        if hasattr(value, "extend"):
            getattr(copy, field.name).extend(value)
        elif hasattr(value, "CopyFrom"):
            getattr(copy, field.name).CopyFrom(value)
        else:
            setattr(copy, field.name, value)
    return copy


def filter_net(param):
    """A copy of ``param`` holding only the layers its ``state`` selects."""
    filtered = without_layers(param)
    for layer in param.layer:
        if layer_included(param.state, layer):
            filtered.layer.add().CopyFrom(layer)
    return filtered


def split_layer_name(layer_name, blob_name, top_index):
    return f"{blob_name}_{layer_name}_{top_index}_split"


def split_blob_name(layer_name, blob_name, top_index, split_index):
    return f"{split_layer_name(layer_name, blob_name, top_index)}_{split_index}"


def _count_consumers(param):
    """Map each bottom to the (layer, top) producing it; count each top's consumers."""
    producer_of_name = {}
    source_of_bottom = {}
    consumers = {}
    loss_weight = {}
    for i, layer in enumerate(param.layer):
        for j, name in enumerate(layer.bottom):
            if name not in producer_of_name:
                raise layer_error(layer.name, f'unknown bottom blob "{name}" (bottom index '
                                              f'{j}); no earlier layer produces it')
            source = producer_of_name[name]
            source_of_bottom[(i, j)] = source
            consumers[source] = consumers.get(source, 0) + 1
        for j, name in enumerate(layer.top):
            producer_of_name[name] = (i, j)
        for j in range(min(len(layer.loss_weight), len(layer.top))):
            source = producer_of_name[layer.top[j]]
            loss_weight[source] = layer.loss_weight[j]
            if layer.loss_weight[j]:
                consumers[source] = consumers.get(source, 0) + 1
    return source_of_bottom, consumers, loss_weight


def insert_splits(param):
    """A copy of ``param`` with Split layers after every top that has several consumers."""
    source_of_bottom, consumers, loss_weight = _count_consumers(param)
    result = without_layers(param)
    next_split = {}
    for i, original in enumerate(param.layer):
        layer = result.layer.add()
        layer.CopyFrom(original)
        for j, name in enumerate(layer.bottom):
            source = source_of_bottom[(i, j)]
            if consumers.get(source, 0) > 1:
                producer = param.layer[source[0]].name
                index = next_split.get(source, 0)
                layer.bottom[j] = split_blob_name(producer, name, source[1], index)
                next_split[source] = index + 1
        for j, name in enumerate(layer.top):
            count = consumers.get((i, j), 0)
            if count > 1:
                weight = loss_weight.get((i, j), 0.0)
                _add_split_layer(result, layer.name, name, j, count, weight)
                if weight:
                    layer.ClearField("loss_weight")
                    next_split[(i, j)] = next_split.get((i, j), 0) + 1
    return result


def _add_split_layer(net, layer_name, blob_name, top_index, count, loss_weight):
    split = net.layer.add()
    split.name = split_layer_name(layer_name, blob_name, top_index)
    split.type = "Split"
    split.bottom.append(blob_name)
    for k in range(count):
        split.top.append(split_blob_name(layer_name, blob_name, top_index, k))
        if loss_weight:
            split.loss_weight.append(loss_weight if k == 0 else 0.0)
