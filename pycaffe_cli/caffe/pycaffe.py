"""``caffe.Net``: BVLC's Python view of a net, over the engine's ``pycaffe_cli.net.Net``.

The names, argument orders and return values are BVLC pycaffe's: ``blobs``, ``params`` and
``layer_dict`` are OrderedDicts in net order, ``forward``/``backward`` take and return
``{blob name: ndarray}``, ``forward_all`` splits any number of inputs into the net's batches.
A blob's ``data``/``diff`` are numpy views of the engine's own memory, so writing into them
feeds the net. Mistakes (an unknown blob or layer, an input of the wrong shape, weights that
do not fit) raise exceptions that name the blob, layer or file.
"""
import os
from collections import OrderedDict
from itertools import zip_longest

import numpy as np

from pycaffe_cli.net import weights as net_weights
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.python import PyBlob as Blob
from pycaffe_cli.log import LOG
from pycaffe_cli.net.net import Net as EngineNet
from pycaffe_cli.proto import caffe_pb2

from caffe._errors import NamedDict, raising_user_errors

_PHASES = (caffe_pb2.TRAIN, caffe_pb2.TEST)


class LayerView:
    """A built-in layer as ``net.layers[i]`` shows it: ``type`` and ``blobs``."""

    def __init__(self, layer):
        self._layer = layer
        self.type = layer.type
        self.blobs = [Blob(blob) for blob in layer.blobs]

    def __repr__(self):
        return f"<caffe layer {self._layer.name!r} of type {self.type!r}>"


class Net:
    """A net built from a prototxt, as ``caffe.Net``.

    ``Net(network_file, phase, level=0, stages=None, weights=None)``, or the older
    ``Net(network_file, weights_file, phase)`` (logged as deprecated, as BVLC does).
    """

    def __init__(self, network_file, *args, level=0, stages=None, weights=None, **kwargs):
        phase, weights = _constructor_arguments(network_file, args, weights, kwargs)
        with raising_user_errors():
            engine = EngineNet.from_file(_path(network_file, "network_file"), phase,
                                         int(level), tuple(stages or ()))
            if weights is not None:
                net_weights.copy_trained_layers_from(engine, _path(weights, "weights"))
        self._attach(engine)

    @classmethod
    def _from_engine(cls, engine):
        """Wrap a Net the engine built (a solver's train or test net)."""
        net = cls.__new__(cls)
        net._attach(engine)
        return net

    def _attach(self, engine):
        self._net = engine
        self._plan, self._planned_names = None, set()
        self._blob_views = [Blob(blob) for blob in engine.blobs]
        self._layer_views = [layer.impl if layer.type == "Python" else LayerView(layer)
                             for layer in engine.layers]
        where = engine.name
        self._blobs_dict = NamedDict("blob", where, zip(engine.blob_names, self._blob_views))
        self._layer_dict = NamedDict("layer", where, zip(engine.layer_names, self._layer_views))
        self._params_dict = NamedDict("layer with parameters", where, [
            (name, layer.blobs) for name, layer in self._layer_dict.items() if len(layer.blobs)])
        self._top_names = self._names_by_layer(lambda entry: entry.top_ids)
        self._bottom_names = self._names_by_layer(lambda entry: entry.bottom_ids)

    # --- what the net holds --------------------------------------------------------------
    @property
    def _blobs(self):
        return list(self._blob_views)

    @property
    def _blob_names(self):
        return list(self._net.blob_names)

    @property
    def _layer_names(self):
        return list(self._net.layer_names)

    @property
    def layers(self):
        return list(self._layer_views)

    @property
    def _inputs(self):
        return list(self._net.input_blob_indices)

    @property
    def _outputs(self):
        return list(self._net.output_blob_indices)

    @property
    def _blob_loss_weights(self):
        return [entry.loss_weight for entry in self._net.blob_entries]

    def _top_ids(self, layer_id):
        return list(self._net.layer_entries[layer_id].top_ids)

    def _bottom_ids(self, layer_id):
        return list(self._net.layer_entries[layer_id].bottom_ids)

    @property
    def blobs(self):
        """OrderedDict of the net's blobs by name, input to output."""
        return self._blobs_dict

    @property
    def blob_loss_weights(self):
        return NamedDict("blob", self._net.name,
                         [(entry.name, entry.loss_weight) for entry in self._net.blob_entries])

    @property
    def layer_dict(self):
        """OrderedDict of the net's layers by name."""
        return self._layer_dict

    @property
    def params(self):
        """OrderedDict of each layer with learnable blobs: name -> [weights, bias, ...]."""
        return self._params_dict

    @property
    def inputs(self):
        return [self._net.blob_names[i] for i in self._net.input_blob_indices]

    @property
    def outputs(self):
        return [self._net.blob_names[i] for i in self._net.output_blob_indices]

    @property
    def top_names(self):
        """OrderedDict: layer name -> names of its top blobs."""
        return self._top_names

    @property
    def bottom_names(self):
        """OrderedDict: layer name -> names of its bottom blobs."""
        return self._bottom_names

    def _names_by_layer(self, ids_of):
        names = self._net.blob_names
        return OrderedDict((entry.name, [names[i] for i in ids_of(entry)])
                           for entry in self._net.layer_entries)

    # --- running -------------------------------------------------------------------------
    def _forward(self, start, end):
        with raising_user_errors():
            callbacks = self._net.callbacks
            if (self._plan is not None and start == 0 and end == len(self._layer_views) - 1
                    and not callbacks["before_forward"] and not callbacks["after_forward"]):
                return self._plan.forward()
            return self._net.forward(start, end)

    def plan_inference(self, keep=()):
        """A pycaffe addition: run every later whole ``forward`` through an inference plan
        (BatchNorm/Scale/Bias folded into the convolution before them, ReLU fused, blob memory
        shared, its layout timed both ways over the first forwards at each input shape; the
        outputs within the bounds of docs/inference.md). After a forward only the inputs,
        outputs and the blobs named in ``keep`` hold their values; ``backward`` is refused.
        ``plan_inference(None)`` goes back to running every layer."""
        with raising_user_errors():
            if self._plan is not None:
                self._plan.release()
                self._plan, self._planned_names = None, set()
            if keep is not None:
                keep = self._known_blobs(keep)
                from pycaffe_cli.inference.plan import InferencePlan
                self._plan = InferencePlan(self._net, keep)
                self._planned_names = set(keep + self.inputs + self.outputs)

    def _check_planned(self, start_id, blobs):
        """With an inference plan, a forward must start at the inputs and ask only for the
        blobs the plan keeps."""
        if self._plan is None:
            return
        if start_id != 0:
            raise ValueError("with an inference plan, forward starts at the first layer "
                             "(earlier blobs' memory is reused); call plan_inference(None)")
        lost = [name for name in blobs if name not in self._planned_names]
        if lost:
            raise ValueError(f"the inference plan does not keep {', '.join(map(repr, lost))}: "
                             "name them in plan_inference(keep=[...])")

    def _backward(self, start, end):
        with raising_user_errors():
            self._net.backward(start, end)

    def forward(self, blobs=None, start=None, end=None, **kwargs):
        """Feed ``kwargs`` (input name -> array of the net's batch size), run layers
        start..end (names, inclusive) and return {name: data} of the outputs (or the end
        layer's tops) and of ``blobs``."""
        blobs = self._known_blobs(blobs)
        start_id = self._layer_index(start, 0)
        end_id = self._layer_index(end, len(self._net.layers) - 1)
        wanted = set((self.top_names[end] if end is not None else self.outputs) + blobs)
        self._check_planned(start_id, blobs)
        if kwargs:
            self._feed("data", kwargs, self.inputs, "Input blob arguments", "input")
        self._forward(start_id, end_id)
        return {name: self.blobs[name].data for name in wanted}

    def backward(self, diffs=None, start=None, end=None, **kwargs):
        """Feed top diffs (output name -> array), run layers start..end backward and return
        {name: diff} of the inputs (or the end layer's bottoms) and of ``diffs``."""
        diffs = self._known_blobs(diffs)
        start_id = self._layer_index(start, len(self._net.layers) - 1)
        end_id = self._layer_index(end, 0)
        wanted = set((self.bottom_names[end] if end is not None else self.inputs) + diffs)
        if kwargs:
            self._feed("diff", kwargs, self.outputs, "Top diff arguments", "output")
        self._backward(start_id, end_id)
        return {name: self.blobs[name].diff for name in wanted}

    def forward_all(self, blobs=None, **kwargs):
        """Forward any number of inputs in batches of the net's size; {name: all rows}."""
        outputs = {name: [] for name in set(self.outputs + self._known_blobs(blobs))}
        for batch in self._batch(kwargs):
            for name, data in self.forward(blobs=blobs, **batch).items():
                outputs[name].extend(data.copy())
        return self._stacked(outputs, kwargs)

    def forward_backward_all(self, blobs=None, diffs=None, **kwargs):
        """forward_all and backward over the batches; returns (outputs, diffs)."""
        outputs = {name: [] for name in set(self.outputs + self._known_blobs(blobs))}
        gradients = {name: [] for name in set(self.inputs + self._known_blobs(diffs))}
        forward_batches = self._batch({k: kwargs[k] for k in self.inputs if k in kwargs})
        backward_batches = self._batch({k: kwargs[k] for k in self.outputs if k in kwargs})
        for feed, top_diffs in zip_longest(forward_batches, backward_batches, fillvalue={}):
            for name, data in self.forward(blobs=blobs, **feed).items():
                outputs[name].extend(data.copy())
            for name, diff in self.backward(diffs=diffs, **top_diffs).items():
                gradients[name].extend(diff.copy())
        return self._stacked(outputs, kwargs), self._stacked(gradients, kwargs)

    def _batch(self, arrays):
        """Yield {name: rows} batches of the net's batch size, the last one zero-padded."""
        if not arrays:
            return
        rows = len(next(iter(arrays.values())))
        batch_size = self._blob_views[0].shape[0]
        for first in range(0, rows - rows % batch_size, batch_size):
            yield {name: values[first:first + batch_size] for name, values in arrays.items()}
        remainder = rows % batch_size
        if remainder:
            yield {name: np.concatenate([values[rows - remainder:], np.zeros(
                (batch_size - remainder,) + np.shape(values)[1:])]) for name, values
                in arrays.items()}

    @staticmethod
    def _stacked(collected, kwargs):
        """Lists of rows -> arrays, without the padding rows of the last batch."""
        stacked = {name: np.asarray(rows) for name, rows in collected.items()}
        if kwargs and stacked:
            given = len(next(iter(kwargs.values())))
            stacked = {name: rows[:given] for name, rows in stacked.items()}
        return stacked

    def _feed(self, field, arrays, allowed, what, role):
        if set(arrays) != set(allowed):
            raise ValueError(f"{what} do not match net {role}s: got {sorted(arrays)}, the net "
                             f"{self._net.name!r} has {role}s {sorted(allowed)}")
        for name, array in arrays.items():
            target = getattr(self.blobs[name], field)
            array = np.asarray(array)
            if array.shape[:1] != target.shape[:1]:
                raise ValueError(f"{role} blob {name!r} is not batch sized: got an array of "
                                 f"shape {array.shape}, the blob's shape is {target.shape} "
                                 "(forward_all takes any number of rows; blob.reshape and "
                                 "net.reshape change the batch size)")
            try:
                target[...] = array
            except ValueError:
                raise ValueError(f"{role} blob {name!r}: an array of shape {array.shape} does "
                                 f"not fit the blob's shape {target.shape}") from None

    def _known_blobs(self, names):
        names = list(names or [])
        for name in names:
            if name not in self._blobs_dict:
                raise KeyError(f"net {self._net.name!r} has no blob named {name!r}")
        return names

    def _layer_index(self, name, default):
        if name is None:
            return default
        layer_id = self._net.layer_id(name)
        if layer_id is None:
            raise KeyError(f"net {self._net.name!r} has no layer named {name!r}")
        return layer_id

    def reshape(self):
        """Propagate new input shapes through every layer."""
        with raising_user_errors():
            self._net.reshape()

    def clear_param_diffs(self):
        self._net.clear_param_diffs()

    # --- weights -------------------------------------------------------------------------
    def copy_from(self, filename):
        """Load same-named layers' weights from a .caffemodel or .caffemodel.h5 file."""
        with raising_user_errors():
            net_weights.copy_trained_layers_from(self._net, _path(filename, "weights"))

    def share_with(self, other):
        """Use ``other``'s weight memory for same-named layers."""
        net_weights.share_trained_layers_with(self._net, other._net)

    def save(self, filename):
        """Write the weights as a binary .caffemodel."""
        net_weights.save_binaryproto(self._net, _path(filename, "filename"))

    def save_hdf5(self, filename):
        net_weights.save_hdf5(self._net, _path(filename, "filename"))

    def load_hdf5(self, filename):
        self.copy_from(filename)

    def set_input_arrays(self, data, labels):
        """Hand a first-layer MemoryData its examples (n a multiple of its batch size)."""
        layer = self._net.layers[0] if self._net.layers else None
        if layer is None or layer.type != "MemoryData":
            raise RuntimeError("set_input_arrays may only be called if the first layer is a "
                               "MemoryDataLayer")
        labels = np.asarray(labels)
        if labels.ndim == 1:
            labels = labels[:, np.newaxis, np.newaxis, np.newaxis]
        with raising_user_errors():
            layer.reset(data, labels)

    # --- callbacks -----------------------------------------------------------------------
    def before_forward(self, function):
        """Call ``function(layer_index)`` before each layer's forward pass."""
        self._net.add_callback("before_forward", function)

    def after_forward(self, function):
        self._net.add_callback("after_forward", function)

    def before_backward(self, function):
        self._net.add_callback("before_backward", function)

    def after_backward(self, function):
        self._net.add_callback("after_backward", function)

    def __repr__(self):
        return f"<caffe.Net {self._net.name!r}: {len(self._layer_views)} layers>"


def _constructor_arguments(network_file, args, weights, kwargs):
    """(phase, weights) from BVLC's two constructor forms."""
    if "phase" in kwargs and len(args) == 0:
        args = (kwargs.pop("phase"),)
    if kwargs:
        raise TypeError(f"Net() got unexpected keyword argument(s) {sorted(kwargs)}")
    if len(args) == 2 and isinstance(args[0], (str, bytes)) and weights is None:
        weights, phase = args
        LOG.warning("DEPRECATION WARNING - deprecated use of Python interface")
        LOG.warning(f"Use this instead (with the named \"weights\" parameter): "
                    f"Net('{network_file}', {phase}, weights='{weights}')")
    elif len(args) == 1:
        phase = args[0]
    else:
        raise TypeError("Net(network_file, phase, level=0, stages=None, weights=None) or "
                        "Net(network_file, weights_file, phase)")
    if isinstance(phase, bool) or phase not in _PHASES:
        raise ValueError(f"phase must be caffe.TRAIN (0) or caffe.TEST (1), got {phase!r}")
    return int(phase), weights


def _path(value, what):
    """A file argument as a str path (bytes and PathLike accepted)."""
    try:
        value = os.fspath(value)
    except TypeError:
        raise TypeError(f"{what} must be a file path, got {type(value).__name__}") from None
    return value.decode() if isinstance(value, bytes) else value


__all__ = ["Blob", "CaffeError", "LayerView", "Net"]
