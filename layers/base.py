"""The layer contract and the layer registry.

Every layer follows Caffe's fixed call order. ``setup`` (never overridden) checks the blob
counts declared as class attributes, then calls ``layer_setup`` (read params, create learnable
blobs), ``reshape`` (shape the tops) and finally stores the loss weights in the tops' diffs.
``forward`` reshapes, runs ``forward_cpu`` (or ``forward_gpu``) and returns the weighted loss;
``backward`` runs ``backward_cpu`` (or ``backward_gpu``). What the inference plan may assume
of a layer and ask of it is a separate interface, ``InferenceHooks`` (inference_hooks.py),
which a layer class names in ``inference_hooks``.
"""
import contextlib
import difflib

import numpy as np

from pycaffe_cli import backend
from pycaffe_cli.blob import Blob
from pycaffe_cli.errors import CaffeError, layer_error
from pycaffe_cli.io.foreign import layer_type_hint, unimplemented_layer_option
from pycaffe_cli.layers.inference_hooks import InferenceHooks
from pycaffe_cli.sizes import blamed

_REGISTRY = {}
_V1_NAMES = {}
_IMPORTED_ALL = []   # becomes [True] once every layer module is imported


def register(type_name, v1=None, fork=None):
    """Class decorator: make a layer class buildable from ``type: "<type_name>"``.

    Args:
        type_name: the prototxt type string ("Pooling").
        v1: the V1LayerParameter enum name ("POOLING"), when the type existed in V1 nets.
        fork: for a layer type BVLC Caffe does not have, the Caffe fork it comes from, as
            pycaffe_cli/io/foreign.py names it (foreign.SSD, ...).
    """
    def decorate(cls):
        if type_name in _REGISTRY:
            raise RuntimeError(f"layer type {type_name!r} registered twice")
        _REGISTRY[type_name] = cls
        cls.type = type_name
        cls.fork = fork
        if v1 is not None:
            _V1_NAMES[v1] = type_name
        return cls
    return decorate


@contextlib.contextmanager
def registered_for_test(*classes):
    """Register layer classes (keyed by their ``type`` attribute) only inside a with-block,
    so test-only layers never show up in the registry other code sees."""
    for cls in classes:
        register(cls.type)(cls)
    try:
        yield
    finally:
        for cls in classes:
            del _REGISTRY[cls.type]


def registered_types():
    """Sorted list of every registered prototxt type string."""
    _import_all_layers()
    return sorted(_REGISTRY)


def v1_type_name(v1_enum_name):
    """The prototxt type string for a V1 layer enum name, or None if unknown."""
    _import_all_layers()
    return _V1_NAMES.get(v1_enum_name)


def layer_class(type_name, layer_name="?"):
    """Look a layer class up by type, with the close matches in the error."""
    _import_all_layers()
    cls = _REGISTRY.get(type_name)
    if cls is None:
        foreign = layer_type_hint(type_name)
        close = difflib.get_close_matches(type_name, _REGISTRY, n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
        if foreign:
            hint = f": {foreign}"
        raise layer_error(layer_name, f'unknown layer type "{type_name}"{hint}')
    return cls


def create_layer(param):
    """Build the layer a caffe.LayerParameter describes.

    An option other Caffe forks add to transform_param or loss_param that pycaffe parses but
    does not implement yet (io/foreign.py) is refused here, for every layer type.
    """
    cls = layer_class(param.type, param.name)
    refused = unimplemented_layer_option(param)
    if refused:
        raise layer_error(param.name, refused)
    return cls(param)


def _raise_blamed(error, layer, stage):
    """Re-raise ``error`` naming ``layer`` where it names no layer yet (a blob's size check,
    an allocation that failed; see pycaffe_cli/sizes.py), else unchanged."""
    wrapped = blamed(error, layer, stage)
    if wrapped is None:
        raise error
    raise wrapped from None


def _import_all_layers():
    # Once per process: listing the package for every layer made a net of 100,000 layers
    # spend minutes here.
    if _IMPORTED_ALL:
        return
    import pycaffe_cli.layers as package
    _import_modules(package, skip=("base", "kernels"))
    _IMPORTED_ALL.append(True)


def _import_modules(package, skip=()):
    """Import every module of ``package`` and of its subpackages (a family of layers, such
    as convolution/), but those named in ``skip``: importing a layer module registers it."""
    import importlib
    import pkgutil
    for info in pkgutil.iter_modules(package.__path__):
        if info.name not in skip:
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            if info.ispkg:
                _import_modules(module)


class Layer:
    """Base class of every layer. Subclasses implement reshape and forward/backward_cpu.

    Blob-count rules are class attributes (None means "no rule"). ``phase`` is the
    caffe.Phase value of the net the layer is in. ``in_place_ok`` says whether a top may be
    the blob of the bottom at its index (``bottom: "x" top: "x"``) with the same numbers as
    out of place; the net refuses in-place wiring for the other layers.
    """

    exact_num_bottom = None
    min_num_bottom = None
    max_num_bottom = None
    exact_num_top = None
    min_num_top = None
    max_num_top = None
    equal_num_bottom_top = False
    auto_top_blobs = False
    in_place_ok = False
    type = None
    fork = None
    inference_hooks = InferenceHooks  # what the inference plan may assume and ask (see there)

    def __init__(self, param):
        self.param = param
        self.name = param.name
        self.phase = param.phase
        self.blobs = [self._blob_from_proto(p) for p in param.blobs]
        self.param_propagate_down = [True] * len(self.blobs)
        self.loss_weights = []

    @staticmethod
    def _blob_from_proto(proto):
        blob = Blob()
        blob.from_proto(proto)
        return blob

    # --- the fixed call order ----------------------------------------------------------
    def setup(self, bottom, top):
        """Check blob counts, set up, reshape, set loss weights. Do not override."""
        try:
            self.check_blob_counts(bottom, top)
            self.layer_setup(bottom, top)
            self.reshape(bottom, top)
            self.set_loss_weights(top)
        except (CaffeError, MemoryError, ValueError) as error:
            _raise_blamed(error, self, "setup")

    def layer_setup(self, bottom, top):
        """Read layer-specific params and create learnable blobs (once)."""

    def reshape(self, bottom, top):
        raise NotImplementedError(f"{type(self).__name__} must implement reshape")

    def forward(self, bottom, top):
        """Reshape, compute the tops, and return this layer's weighted loss."""
        try:
            self.reshape(bottom, top)
            if self._use_gpu("forward"):
                self.forward_gpu(bottom, top)
            else:
                self.forward_cpu(bottom, top)
        except (CaffeError, MemoryError, ValueError) as error:
            _raise_blamed(error, self, "forward")
        return self._weighted_loss(top)

    def forward_pass(self):
        """The bound ``forward_cpu`` or ``forward_gpu`` that ``forward`` runs in the current
        mode (no reshape, no loss): what the inference plan calls once shapes are set."""
        return self.forward_gpu if self._use_gpu("forward") else self.forward_cpu

    def inference(self):
        """This layer's ``inference_hooks``: what the inference plan may assume of it and ask
        of it (InferenceHooks)."""
        return self.inference_hooks(self)

    def backward(self, top, propagate_down, bottom):
        try:
            if self._use_gpu("backward"):
                self.backward_gpu(top, propagate_down, bottom)
            else:
                self.backward_cpu(top, propagate_down, bottom)
        except (CaffeError, MemoryError, ValueError) as error:
            _raise_blamed(error, self, "backward")

    def forward_cpu(self, bottom, top):
        raise NotImplementedError(f"{type(self).__name__} must implement forward_cpu")

    def backward_cpu(self, top, propagate_down, bottom):
        """Layers without a backward pass leave this as a no-op, as Caffe's do."""

    forward_gpu = None   # a layer with a GPU path defines forward_gpu(bottom, top)
    backward_gpu = None  # ... and backward_gpu(top, propagate_down, bottom)

    def _use_gpu(self, direction):
        """True in GPU mode when the layer has a GPU path for ``direction``; otherwise the
        CPU path runs (its blob accesses copy what they need to the host), and in GPU mode
        that is logged once per layer type and direction."""
        if backend.mode() is not backend.Mode.GPU:
            return False
        if getattr(self, f"{direction}_gpu") is not None:
            return True
        cpu_method = getattr(type(self), f"{direction}_cpu")
        if cpu_method is not getattr(Layer, f"{direction}_cpu"):
            backend.log_once(("cpu-fallback", self.type, direction),
                             f"{self.type} layers have no GPU {direction} pass; running it on "
                             f"the CPU (their blobs are copied to the host and back)")
        return False

    # --- loss weights ------------------------------------------------------------------
    def default_loss_weight(self, top_index):
        """Loss layers return 1 for their first top; everything else 0."""
        return 0.0

    def set_loss_weights(self, top):
        given = list(self.param.loss_weight)
        if given and len(given) != len(top):
            raise layer_error(self.name, f"loss_weight must be given once per top "
                                         f"({len(top)}), got {len(given)}")
        self.loss_weights = [given[i] if given else self.default_loss_weight(i)
                             for i in range(len(top))]
        for blob, weight in zip(top, self.loss_weights):
            if weight:
                blob.diff[...] = weight

    def _weighted_loss(self, top):
        loss = 0.0
        for blob, weight in zip(top, self.loss_weights):
            if weight:
                data = blob.cpu_data.ravel()
                loss += float(np.dot(data.astype(np.float64), blob.cpu_diff.ravel()))
        return loss

    # --- resumable state -----------------------------------------------------------------
    def get_state(self):
        """JSON-able state beyond the learnable blobs (a data cursor, say), or None.

        The solver stores it beside a snapshot so a resumed run continues exactly where an
        uninterrupted one would; Caffe itself restarts data layers from the beginning.
        """
        return None

    def set_state(self, state):
        """Restore what ``get_state`` returned."""

    # --- capabilities ------------------------------------------------------------------
    def allow_force_backward(self, bottom_index):
        """Whether force_backward may make this bottom receive a gradient."""
        return True

    def check_blob_counts(self, bottom, top):
        nb, nt = len(bottom), len(top)
        rules = [
            (self.exact_num_bottom, nb == self.exact_num_bottom, "exactly", "bottom"),
            (self.min_num_bottom, self.min_num_bottom is None or nb >= self.min_num_bottom,
             "at least", "bottom"),
            (self.max_num_bottom, self.max_num_bottom is None or nb <= self.max_num_bottom,
             "at most", "bottom"),
            (self.exact_num_top, nt == self.exact_num_top, "exactly", "top"),
            (self.min_num_top, self.min_num_top is None or nt >= self.min_num_top,
             "at least", "top"),
            (self.max_num_top, self.max_num_top is None or nt <= self.max_num_top,
             "at most", "top"),
        ]
        for wanted, ok, how, what in rules:
            if wanted is not None and not ok:
                got = nb if what == "bottom" else nt
                raise layer_error(self.name, f"{self.type} layer takes {how} {wanted} "
                                             f"{what} blob(s), got {got}")
        if self.equal_num_bottom_top and nb != nt:
            raise layer_error(self.name, f"{self.type} layer needs as many tops as bottoms, "
                                         f"got {nb} bottom(s) and {nt} top(s)")

    def error(self, message):
        """A CaffeError naming this layer, for layers to raise on bad params or shapes."""
        return layer_error(self.name, message)

    def check_in_place(self, blob_name):
        """Refuse in-place wiring (top ``blob_name`` is also this layer's bottom) unless the
        layer computes the same in place (``in_place_ok``); Caffe runs most layers in place
        without a word and computes garbage."""
        if not self.in_place_ok:
            raise self.error(f'{self.type} cannot run in place: its top "{blob_name}" is also '
                             "its bottom (give the top a name of its own)")


class LossLayer(Layer):
    """Losses: two bottoms (prediction, target), one scalar top with loss weight 1.

    A loss layer written without a ``top`` gets one from the net, named "(automatic)" and
    not an output of the net (Caffe's LossLayer::AutoTopBlobs).
    """

    exact_num_bottom = 2
    exact_num_top = 1
    auto_top_blobs = True

    def default_loss_weight(self, top_index):
        return 1.0 if top_index == 0 else 0.0

    def allow_force_backward(self, bottom_index):
        return bottom_index != 1

    def reshape(self, bottom, top):
        if bottom[0].shape_at(0) != bottom[1].shape_at(0):
            raise self.error(f"the data and label blobs must have the same first dimension "
                             f"(got {bottom[0].shape_string()} and {bottom[1].shape_string()})")
        top[0].reshape(())


class NeuronLayer(Layer):
    """Elementwise layers: one bottom, one top of the same shape (in place allowed)."""

    exact_num_bottom = 1
    exact_num_top = 1
    in_place_ok = True

    def reshape(self, bottom, top):
        top[0].reshape_like(bottom[0])
