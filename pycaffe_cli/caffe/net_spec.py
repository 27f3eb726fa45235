"""Write Caffe nets as Python expressions (``caffe.net_spec``, BVLC's net specification).

``layers`` and ``params`` are pseudo-modules: ``layers.Convolution(bottom, kernel_size=3)``
returns a :class:`Top` standing for the layer's output blob, and ``params.Pooling.MAX`` is the
enum value ``caffe_pb2.PoolingParameter.MAX``. Keyword arguments fill the layer's
``<type>_param`` message when it has that field (``kernel_size`` goes to
``convolution_param``), the ``LayerParameter`` itself otherwise (``include``, ``loss_weight``,
``param``), and any keyword ending in ``param`` always goes to the ``LayerParameter``. Two
keywords are not fields: ``ntop`` (how many tops; 0 returns the :class:`Function`, 2 or more
a tuple of Tops) and ``in_place`` (the tops reuse the bottoms' names).

Names: a :class:`NetSpec` names each top after the attribute it was assigned to, and a layer
after its first top. Unnamed tops and top-less layers get ``<Type><count>`` names
(``Convolution1``, ``Convolution2``), counted per type in the order they are written out.
``str(spec.to_proto())`` is the prototxt text, field for field what BVLC Caffe writes.
"""
from collections import Counter, OrderedDict

from pycaffe_cli.proto import caffe_pb2

_PARAM_FIELD_SUFFIX = "_param"
_PARAM_TYPE_SUFFIX = "Parameter"
# What a wrong keyword makes protobuf raise; re-raised as the same kind, naming the layer.
_ASSIGN_ERRORS = (AttributeError, TypeError, ValueError)


def param_name_dict():
    """Map layer type names to the prefix of their ``LayerParameter`` parameter field.

    Every ``LayerParameter`` field ending in ``_param`` holds a ``<Name>Parameter`` message,
    e.g. ``convolution_param: ConvolutionParameter`` gives ``'Convolution': 'convolution'``.
    A few entries are not layer types (``'Transformation': 'transform'``); they do no harm.

    Returns:
        dict: type name (``'InnerProduct'``) to field prefix (``'inner_product'``).
    """
    names = {}
    for field in caffe_pb2.LayerParameter.DESCRIPTOR.fields:
        if field.name.endswith(_PARAM_FIELD_SUFFIX) and field.message_type is not None:
            type_name = field.message_type.name[:-len(_PARAM_TYPE_SUFFIX)]
            names[type_name] = field.name[:-len(_PARAM_FIELD_SUFFIX)]
    return names


def to_proto(*tops):
    """Build a ``NetParameter`` holding every layer needed to compute ``tops``.

    Args:
        *tops: Tops (or top-less Functions); every blob and layer gets an automatic name.

    Returns:
        caffe_pb2.NetParameter: the layers in dependency order.
    """
    layers = OrderedDict()
    autonames = Counter()
    for index, top in enumerate(tops):
        _check_spec_value(top, f"to_proto argument {index}")
        _function_of(top)._to_proto(layers, {}, autonames)
    return _net_of(layers)


def assign_proto(proto, name, val):
    """Set field ``name`` of the message ``proto`` from a Python value, recursively.

    A dict fills a sub-message key by key; a list of dicts adds one sub-message per dict; any
    other list extends a repeated field; a single value given to a repeated field is taken as
    a one-element list (``dim=3`` means ``dim: [3]``); anything else is assigned.

    Args:
        proto: a protobuf message.
        name: the field's name.
        val: the value (dict, list, or scalar/enum/string).
    """
    field = getattr(proto, name)
    if hasattr(field, "extend") and not isinstance(val, list):
        val = [val]
    if isinstance(val, list):
        _extend_repeated(field, val)
    elif isinstance(val, dict):
        for key, item in val.items():
            assign_proto(field, key, item)
    else:
        setattr(proto, name, val)


def _extend_repeated(field, values):
    if values and isinstance(values[0], dict):
        for item in values:
            message = field.add()
            for key, value in item.items():
                assign_proto(message, key, value)
    else:
        field.extend(values)


def _function_of(value):
    """The layer behind a Top, or the top-less Function itself."""
    return value.fn if isinstance(value, Top) else value


def _check_spec_value(value, where):
    if not isinstance(value, (Top, Function)):
        hint = ""
        if isinstance(value, tuple):
            hint = " (a layer with ntop > 1 returns a tuple: unpack it, e.g. n.a, n.b = ...)"
        raise TypeError(f"{where} is a {type(value).__name__}, not a Top{hint}")


def _net_of(layers):
    net = caffe_pb2.NetParameter()
    net.layer.extend(layers.values())
    return net


class Top(object):
    """One output blob of a layer (the ``n``-th top of the Function ``fn``)."""

    def __init__(self, fn, n):
        self.fn = fn
        self.n = n

    def __repr__(self):
        return f"<Top {self.n} of {self.fn.type_name}>"

    def to_proto(self):
        """Build a ``NetParameter`` holding every layer needed to compute this top."""
        return to_proto(self)

    def _update(self, params):
        self.fn._update(params)

    def _to_proto(self, layers, names, autonames):
        return self.fn._to_proto(layers, names, autonames)


class Function(object):
    """A layer: its type, its inputs (Tops of other layers) and its keyword parameters.

    Args:
        type_name: the layer type, as written in a prototxt (``'Convolution'``).
        inputs: the bottom Tops, in order.
        params: keyword parameters; ``ntop`` and ``in_place`` are taken out of it.

    Raises:
        TypeError: an input is not a Top (e.g. the tuple a layer with ``ntop=2`` returns).
    """

    def __init__(self, type_name, inputs, params):
        self.type_name = type_name
        for index, bottom in enumerate(inputs):
            if not isinstance(bottom, Top):
                raise TypeError(f"{type_name} input {index} is not a Top "
                                f"(type is {type(bottom)})")
        self.inputs = inputs
        self.params = params
        self.ntop = self.params.pop("ntop", 1)
        self.in_place = self.params.pop("in_place", False)
        self.tops = tuple(Top(self, n) for n in range(self.ntop))

    def __repr__(self):
        return f"<Function {self.type_name} ({len(self.inputs)} bottoms, {self.ntop} tops)>"

    def _get_name(self, names, autonames):
        """The layer's name: its first top's, else its own NetSpec name, else automatic."""
        if self not in names and self.ntop > 0:
            names[self] = self._get_top_name(self.tops[0], names, autonames)
        elif self not in names:
            autonames[self.type_name] += 1
            names[self] = self.type_name + str(autonames[self.type_name])
        return names[self]

    def _get_top_name(self, top, names, autonames):
        if top not in names:
            autonames[top.fn.type_name] += 1
            names[top] = top.fn.type_name + str(autonames[top.fn.type_name])
        return names[top]

    def _update(self, params):
        self.params.update(params)

    def _to_proto(self, layers, names, autonames):
        """Add this layer (after the layers it reads from) to ``layers``, once."""
        if self in layers:
            return
        bottoms = []
        for bottom in self.inputs:
            bottom._to_proto(layers, names, autonames)
            bottoms.append(layers[bottom.fn].top[bottom.n])
        layer = caffe_pb2.LayerParameter(type=self.type_name, bottom=bottoms)
        if self.in_place:
            layer.top.extend(layer.bottom)
        else:
            layer.top.extend(self._get_top_name(top, names, autonames) for top in self.tops)
        layer.name = self._get_name(names, autonames)
        for key, value in self.params.items():
            self._assign(layer, key, value)
        layers[self] = layer

    def _assign(self, layer, key, value):
        """Put one keyword parameter into the layer's type message or the layer itself."""
        where = f'layer "{layer.name}" ({self.type_name})'
        target = _param_target(layer, self.type_name, key)
        if key not in target.DESCRIPTOR.fields_by_name:
            raise AttributeError(f"{where}: unknown parameter {key!r}"
                                 f"{_unknown_key_hint(self.type_name, key)}")
        try:
            assign_proto(target, key, value)
        except _ASSIGN_ERRORS as error:
            kind = next(kind for kind in _ASSIGN_ERRORS if isinstance(error, kind))
            raise kind(f"{where}: cannot set {key}={value!r}: {error}") from None


def _param_target(layer, type_name, key):
    """The message a keyword goes to: ``<type>_param`` when it has the field, else the layer."""
    if key.endswith("param") or type_name not in _param_names:
        return layer
    message = getattr(layer, _param_names[type_name] + _PARAM_FIELD_SUFFIX)
    if key in message.DESCRIPTOR.fields_by_name:
        return message
    return layer


def _unknown_key_hint(type_name, key):
    if type_name in _param_names:
        field = _param_names[type_name] + _PARAM_FIELD_SUFFIX
        return f" (not a field of {field} nor of LayerParameter)"
    return (f" ({type_name} has no parameter message of its own to hold it; name the message, "
            f"e.g. convolution_param=dict({key}=...))")


class NetSpec(object):
    """A set of named Tops: assign them as attributes (or items), then call :meth:`to_proto`.

    ``to_proto`` writes every layer needed for the assigned Tops, naming each top after its
    attribute; layers nobody named get automatic names.
    """

    def __init__(self):
        super(NetSpec, self).__setattr__("tops", OrderedDict())

    def __setattr__(self, name, value):
        self.tops[name] = value

    def __getattr__(self, name):
        tops = self.__dict__.get("tops")
        if tops is None or name not in tops:
            known = ", ".join(tops or ()) or "none"
            raise AttributeError(f"NetSpec has no top named {name!r} (it has: {known})")
        return tops[name]

    def __setitem__(self, key, value):
        self.__setattr__(key, value)

    def __getitem__(self, item):
        if item not in self.tops:
            raise KeyError(f"NetSpec has no top named {item!r}")
        return self.tops[item]

    def __delitem__(self, name):
        del self.tops[name]

    def keys(self):
        """The assigned names, in assignment order."""
        return list(self.tops.keys())

    def vals(self):
        """The assigned Tops, in assignment order."""
        return list(self.tops.values())

    def update(self, name, params):
        """Add or replace keyword parameters of the layer that produces top ``name``."""
        self.tops[name]._update(params)

    def to_proto(self):
        """Build the ``NetParameter`` for every assigned Top, with the assigned names.

        Raises:
            TypeError: an attribute holds something other than a Top or a top-less Function.
        """
        for name, top in self.tops.items():
            _check_spec_value(top, f"NetSpec attribute {name!r}")
        names = {top: name for name, top in self.tops.items()}
        autonames = Counter()
        layers = OrderedDict()
        for top in self.tops.values():
            top._to_proto(layers, names, autonames)
        return _net_of(layers)


def _is_special(name):
    return name.startswith("__") and name.endswith("__")


class Layers(object):
    """``layers.<Type>(*bottoms, **params)`` specifies a layer of that type (see the module).

    It returns the layer's Top, a tuple of Tops when ``ntop > 1``, or the Function itself
    when ``ntop=0``.
    """

    def __getattr__(self, name):
        if _is_special(name):
            raise AttributeError(name)

        def layer_fn(*args, **kwargs):
            fn = Function(name, args, kwargs)
            if fn.ntop == 0:
                return fn
            if fn.ntop == 1:
                return fn.tops[0]
            return fn.tops
        layer_fn.__name__ = name
        layer_fn.__doc__ = f"Specify a {name} layer reading the given bottoms."
        return layer_fn


class _EnumValues(object):
    """``params.<Type>``: the enum values of ``caffe_pb2.<Type>Parameter``."""

    def __init__(self, name):
        self._message_name = name + _PARAM_TYPE_SUFFIX

    def __getattr__(self, value_name):
        if _is_special(value_name):
            raise AttributeError(value_name)
        message = getattr(caffe_pb2, self._message_name, None)
        if message is None:
            raise AttributeError(f"caffe_pb2 has no message {self._message_name}")
        try:
            return getattr(message, value_name)
        except AttributeError:
            raise AttributeError(
                f"{self._message_name} has no enum value {value_name!r}") from None


class Parameters(object):
    """``params.<Type>.<VALUE>`` is ``caffe_pb2.<Type>Parameter.<VALUE>``, e.g.
    ``params.Pooling.MAX``."""

    def __getattr__(self, name):
        if _is_special(name):
            raise AttributeError(name)
        return _EnumValues(name)


_param_names = param_name_dict()
layers = Layers()
params = Parameters()
