"""Draw a ``NetParameter`` as a graph (``caffe.draw``, BVLC's module), with pydot and Graphviz.

Layers are boxes (coloured by type: convolutions red, pooling orange, inner products purple,
in-place layers green, the rest blue), blobs octagons, and edges run from bottoms to layers
to tops; a layer's edges to its tops carry its output size (``num_output``, a Data layer's
batch). Labels and colours need nothing beyond protobuf; building the graph needs pydot
(``pip install 'pycaffe[draw]'``) and rendering an image needs Graphviz's ``dot`` program.
"""
from pycaffe_cli.io.files import atomic_write
from pycaffe_cli.proto import caffe_pb2

LAYER_STYLE_DEFAULT = {'shape': 'record',
                       'fillcolor': '#6495ED',
                       'style': 'filled'}
NEURON_LAYER_STYLE = {'shape': 'record',
                      'fillcolor': '#90EE90',
                      'style': 'filled'}
BLOB_STYLE = {'shape': 'octagon',
              'fillcolor': '#E0E0E0',
              'style': 'filled'}

_LEARNING_LAYERS = ('Convolution', 'Deconvolution', 'InnerProduct')
_EMPTY_LABEL = '""'


def _pydot():
    """pydot, imported on first use so that labels and colours work without it."""
    try:
        import pydot
    except ImportError as error:
        raise ImportError("caffe.draw needs pydot to build graphs: "
                          "pip install 'pycaffe[draw]' (and Graphviz for images)") from error
    return pydot


def get_pooling_types_dict():
    """Map ``PoolingParameter.PoolMethod`` numbers to their names (0 -> 'MAX', ...)."""
    values = caffe_pb2.PoolingParameter.PoolMethod.DESCRIPTOR.values
    return {value.number: value.name for value in values}


def get_edge_label(layer):
    """The label of the edges from ``layer`` to its tops: ``'Batch N'`` for a Data layer,
    ``num_output`` for (de)convolutions and inner products, an empty label (``'""'``)
    otherwise."""
    if layer.type == 'Data':
        return 'Batch ' + str(layer.data_param.batch_size)
    if layer.type in ('Convolution', 'Deconvolution'):
        return str(layer.convolution_param.num_output)
    if layer.type == 'InnerProduct':
        return str(layer.inner_product_param.num_output)
    return _EMPTY_LABEL


def get_layer_lr_mult(layer):
    """The learning rate multipliers ``(weights, bias)`` of a learning layer (1.0 unless set).

    Args:
        layer: a Convolution, Deconvolution or InnerProduct ``LayerParameter``.

    Raises:
        ValueError: another layer type, or more than two ``param`` entries.
    """
    if layer.type not in _LEARNING_LAYERS:
        raise ValueError("%s layers do not have a learning rate multiplier" % layer.type)
    mults = [spec.lr_mult for spec in layer.param]
    if len(mults) > 2:
        raise ValueError(f'layer "{layer.name}": could not parse the learning rate '
                         f'multiplier ({len(mults)} param entries)')
    return tuple(mults + [1.0] * (2 - len(mults)))


def _spatial_description(layer, separator):
    if layer.type == 'Pooling':
        pooling = layer.pooling_param
        kernel, stride, pad = pooling.kernel_size, pooling.stride, pooling.pad
    else:
        conv = layer.convolution_param
        kernel = conv.kernel_size[0] if len(conv.kernel_size) else 1
        stride = conv.stride[0] if len(conv.stride) else 1
        pad = conv.pad[0] if len(conv.pad) else 0
    return separator.join(["kernel size: %d" % kernel, "stride: %d" % stride,
                           "pad: %d" % pad])


def get_layer_label(layer, rankdir, display_lrm=False):
    """The text of a layer's node: name, (type), spatial parameters, learning rate mults.

    Args:
        layer: a ``LayerParameter``.
        rankdir: 'LR', 'TB', 'BT', ...; a vertical layout ('TB', 'BT') puts the parts on one
            line separated by spaces, any other on separate lines.
        display_lrm: also show the lr_mult of learning layers (when one is non-zero).

    Returns:
        str: the label in double quotes (so that DOT keeps its colons).
    """
    separator = ' ' if rankdir in ('TB', 'BT') else r'\n'
    if layer.type == 'Pooling':
        pool_name = get_pooling_types_dict()[layer.pooling_param.pool]
        descriptors = [layer.name, '(%s %s)' % (layer.type, pool_name)]
    else:
        descriptors = [layer.name, '(%s)' % layer.type]
    if layer.type in ('Convolution', 'Deconvolution', 'Pooling'):
        descriptors.append(_spatial_description(layer, separator))
    if display_lrm and layer.type in _LEARNING_LAYERS:
        weights_mult, bias_mult = get_layer_lr_mult(layer)
        if weights_mult or bias_mult:
            descriptors.append("lr mult: %.1f, %.1f" % (weights_mult, bias_mult))
    return '"%s"' % separator.join(descriptors)


def choose_color_by_layertype(layertype):
    """The fill colour of a layer's node: '#FF5050' for (de)convolutions, '#FF9900' for
    pooling, '#CC33FF' for inner products, '#6495ED' otherwise."""
    if layertype in ('Convolution', 'Deconvolution'):
        return '#FF5050'
    if layertype == 'Pooling':
        return '#FF9900'
    if layertype == 'InnerProduct':
        return '#CC33FF'
    return '#6495ED'


def _in_phase(layer, phase):
    """Whether the layer's include/exclude rules keep it in ``phase`` (None keeps all).

    Only the rules' ``phase`` fields count (an unset one reads as TRAIN), as in BVLC.
    """
    if phase is None:
        return True
    if len(layer.include) and len(layer.exclude):
        raise ValueError('layer ' + layer.name + ' has both include and exclude specified.')
    included = not len(layer.include) or any(rule.phase == phase for rule in layer.include)
    return included and not any(rule.phase == phase for rule in layer.exclude)


def _layer_node_style(layer):
    if len(layer.bottom) == 1 and len(layer.top) == 1 and layer.bottom[0] == layer.top[0]:
        return NEURON_LAYER_STYLE
    return dict(LAYER_STYLE_DEFAULT, fillcolor=choose_color_by_layertype(layer.type))


def _graph_parts(caffe_net, rankdir, label_edges, phase, display_lrm):
    """Nodes as ``{key: (name, style)}`` and edges as ``(src key, dst key, label)``.

    A blob's node takes the style of its last mention: an octagon where a layer reads it, a
    plain node where the last mention is a layer writing it (a net output).
    """
    nodes, edges = {}, []
    for layer in caffe_net.layer:
        if not _in_phase(layer, phase):
            continue
        layer_key = "%s_%s" % (layer.name, layer.type)
        label = get_layer_label(layer, rankdir, display_lrm=display_lrm)
        nodes[layer_key] = (label, _layer_node_style(layer))
        for bottom in layer.bottom:
            nodes[bottom + '_blob'] = (bottom, BLOB_STYLE)
            edges.append((bottom + '_blob', layer_key, _EMPTY_LABEL))
        top_label = get_edge_label(layer) if label_edges else _EMPTY_LABEL
        for top in layer.top:
            nodes[top + '_blob'] = (top, {})
            edges.append((layer_key, top + '_blob', top_label))
    return nodes, edges


def get_pydot_graph(caffe_net, rankdir, label_edges=True, phase=None, display_lrm=False):
    """Build the pydot graph of a net.

    Args:
        caffe_net: a ``caffe_pb2.NetParameter``.
        rankdir: Graphviz's layout direction: 'LR', 'TB', 'BT' or 'RL'.
        label_edges: label the edges to a layer's tops with its output size.
        phase: ``caffe.TRAIN`` or ``caffe.TEST`` to draw only that phase's layers; None
            (default) draws all.
        display_lrm: show the learning rate multipliers of learning layers.

    Returns:
        pydot.Dot: a digraph named after the net ('Net' when it has no name).

    Raises:
        ImportError: pydot is not installed.
        ValueError: a drawn layer has both include and exclude rules.
    """
    pydot = _pydot()
    graph = pydot.Dot(caffe_net.name if caffe_net.name else 'Net', graph_type='digraph',
                      rankdir=rankdir)
    nodes, edges = _graph_parts(caffe_net, rankdir, label_edges, phase, display_lrm)
    pydot_nodes = {key: pydot.Node(name, **style) for key, (name, style) in nodes.items()}
    for node in pydot_nodes.values():
        graph.add_node(node)
    for src, dst, label in edges:
        graph.add_edge(pydot.Edge(pydot_nodes[src], pydot_nodes[dst], label=label))
    return graph


def draw_net(caffe_net, rankdir, ext='png', phase=None, display_lrm=False):
    """Render a net with Graphviz and return the image's bytes.

    Args:
        caffe_net: a ``caffe_pb2.NetParameter``.
        rankdir: the layout direction ('LR', 'TB', 'BT', 'RL').
        ext: a Graphviz output format ('png', 'pdf', 'svg', 'dot', ...).
        phase: None (all layers), ``caffe.TRAIN`` or ``caffe.TEST``.
        display_lrm: show the learning rate multipliers of learning layers.

    Returns:
        bytes: the rendered image.

    Raises:
        ImportError: pydot is not installed.
        FileNotFoundError: Graphviz's ``dot`` program is not installed.
    """
    graph = get_pydot_graph(caffe_net, rankdir, phase=phase, display_lrm=display_lrm)
    try:
        return graph.create(format=ext)
    except FileNotFoundError as error:
        raise FileNotFoundError(f"caffe.draw renders images with Graphviz's dot program, "
                                f"which was not found ({error}); install Graphviz "
                                f"(e.g. apt-get install graphviz)") from error


def draw_net_to_file(caffe_net, filename, rankdir='LR', phase=None, display_lrm=False):
    """Render a net to ``filename``, in the format its extension names (``net.png``,
    ``net.svg``, ``net.dot`` for the DOT source).

    The file is written whole or not at all. Arguments are those of :func:`draw_net`.
    """
    ext = filename[filename.rfind('.') + 1:]
    image = draw_net(caffe_net, rankdir, ext, phase, display_lrm)
    with atomic_write(filename, "wb") as stream:
        stream.write(image)
