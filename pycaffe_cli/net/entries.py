"""The records a Net keeps: one per layer, blob, param and learnable param.

Caffe's C++ Net holds these facts in ~27 parallel vectors (layers_, bottom_vecs_, top_ids_,
blob_need_backward_, param_owners_, params_lr_, ...) that every change must keep in step;
here each fact about a layer, blob or param lives in one field of one record. Records refer
to each other by index: ``LayerEntry.bottom_ids`` / ``top_ids`` index ``Net.blob_entries``,
``LayerEntry.param_ids`` and ``ParamEntry.owner`` index ``Net.param_entries``, and
``ParamEntry.learnable_id`` indexes ``Net.learnable_entries``.
"""
from dataclasses import dataclass, field

from pycaffe_cli.errors import layer_error


@dataclass(slots=True, eq=False)
class LayerEntry:
    """A layer as the net wired it.

    ``bottoms``/``tops`` are the Blob objects (what forward/backward are called with) and
    ``bottom_ids``/``top_ids`` their indices in ``Net.blob_entries``; both are fixed once the
    layer is wired. ``bottom_need_backward[j]``: whether backward computes bottom j's diff.
    """
    layer: object
    bottoms: list = field(default_factory=list)
    tops: list = field(default_factory=list)
    bottom_ids: list = field(default_factory=list)
    top_ids: list = field(default_factory=list)
    bottom_need_backward: list = field(default_factory=list)
    need_backward: bool = False
    param_ids: list = field(default_factory=list)

    @property
    def name(self):
        return self.layer.name


@dataclass(slots=True, eq=False)
class BlobEntry:
    """A blob of the net: its name ("(automatic)" for an unnamed loss top), whether backward
    reaches it, and the loss weight of the top that produces it (0 if none)."""
    blob: object
    name: str
    need_backward: bool = False
    loss_weight: float = 0.0


@dataclass(slots=True, eq=False)
class ParamEntry:
    """A layer's param blob: ``owner`` is the index of the param it shares (its first
    holder's) or -1 if it owns its storage; ``layer_id``/``index``: the layer and the blob's
    index in ``layer.blobs``; ``learnable_id``: the learnable param whose storage it uses."""
    blob: object
    owner: int
    layer_id: int
    index: int
    display_name: str
    learnable_id: int


@dataclass(slots=True, eq=False)
class LearnableEntry:
    """A param the solver updates (an owner), with its multipliers: from the owner's
    ParamSpec, or from a sharer's spec that sets one the owner left unset."""
    blob: object
    lr_mult: float
    decay_mult: float
    has_lr_mult: bool
    has_decay_mult: bool

    @classmethod
    def from_spec(cls, blob, spec):
        return cls(blob, spec.lr_mult, spec.decay_mult, spec.HasField("lr_mult"),
                   spec.HasField("decay_mult"))

    def merge(self, spec, layer_name):
        """Fold a sharing layer's ParamSpec in: a multiplier it sets must agree with one
        already set (Caffe's AppendParam)."""
        for name in ("lr_mult", "decay_mult"):
            if not spec.HasField(name):
                continue
            value, has = getattr(spec, name), "has_" + name
            if getattr(self, has) and getattr(self, name) != value:
                raise layer_error(layer_name, f"shared param '{spec.name}' has mismatched "
                                              f"{name}")
            setattr(self, has, True)
            setattr(self, name, value)
