"""The interface between the inference plan and the layers: ``InferenceHooks``.

The inference plan (pycaffe_cli/inference/) runs a TEST net forward only, with less work and
the same numbers: it folds BatchNorm / Scale / Bias layers into the convolution or inner
product before them, fuses ReLUs, moves blobs into shared buffers, shares scratch buffers and
runs cheaper forward passes. Of a layer it uses Caffe's contract (``reshape``, ``forward``,
``forward_pass``) and, for everything else, ``layer.inference()``: an instance of the hooks
class the layer class names in ``Layer.inference_hooks`` (layers/base.py), by default
``InferenceHooks`` below. Layers with hooks of their own: Convolution and Deconvolution
(convolution/base.py, convolution/convolution.py), InnerProduct, Eltwise, Scale, Pooling,
Concat, Filter and Python.
"""
from typing import NamedTuple


class SpecialPath(NamedTuple):
    """A faster way a layer's forward-only pass runs (``InferenceHooks.special_path``)."""
    key: str          # a short label, for the plan's accuracy report: "winograd"
    description: str  # what the plan's summary says the layers ran as: "Winograd F(4x4, 3x3)"


class InferenceHooks:
    """What the inference plan (pycaffe_cli/inference/) may assume of a layer, and ask of it.

    The plan runs a TEST net forward only, with less work and the same numbers. It uses
    nothing of a layer beyond Caffe's contract (``reshape``, ``forward``, ``forward_pass``)
    but an instance of this class, ``layer.inference()``. The defaults describe an ordinary
    layer: its reshape reads only the bottoms' shapes, it keeps no view of its blobs' memory
    from one call to the next, keeps no scratch buffers, and its forward needs nothing
    changed when no backward follows.

    Adding a layer type: where all of that holds, do nothing. Otherwise subclass this class
    in the layer's module, override only what differs (the class attributes below, or the
    methods), and name the subclass in the layer class's ``inference_hooks`` attribute::

        class FilterInferenceHooks(InferenceHooks):
            reshape_reads_values = True  # the selector's values set the tops' first axis

        @register("Filter")
        class FilterLayer(Layer):
            inference_hooks = FilterInferenceHooks

    An instance holds the layer (``self.layer``) and nothing else: whatever state a hook sets
    (a fused ReLU's slope) lives on the layer, whose forward reads it. The plan asks for an
    instance whenever it needs one, so a hook must not keep state of its own.

    Attributes:
        reshape_reads_values: reshape reads the bottoms' values, not only their shapes
            (Filter's selector, a Python layer's code): the plan then runs the layer's full
            ``Layer.forward`` every time, and reshapes later steps when its tops change shape.
        keeps_blob_views: the layer may keep arrays of its blobs between calls (Python
            layers): the plan never moves those blobs into buffers other blobs share.
        workspace_family: a name the layers that keep scratch buffers between calls share
            (a convolution's column buffer), or None. The plan runs one step at a time, so
            every layer of a family uses the first one's buffers (``share_workspace``).
    """

    reshape_reads_values = False
    keeps_blob_views = False
    workspace_family = None

    def __init__(self, layer):
        self.layer = layer

    def forward_pass(self):
        """The function ``(bottom, top)`` the plan calls once shapes are set: the tops of
        ``Layer.forward_pass()`` (or within the bounds pycaffe_cli/inference/accuracy.py
        states, where it runs another way: Winograd), free to keep nothing for a backward
        pass that will not come (max pooling skips its argmax mask)."""
        return self.layer.forward_pass()

    def share_workspace(self, donor):
        """Use the scratch buffers of ``donor``, a layer of the same ``workspace_family``
        that never runs at the same time as this one."""

    def forget_weight_transforms(self):
        """Drop anything computed from the weights and kept (transformed weights): the plan
        calls it when it is built and from ``refold``, after weights were written through an
        array kept from before, which their data stamps do not see."""

    def fuse_relu(self, negative_slope):
        """From now on apply ReLU with ``negative_slope`` as the forward-only pass writes its
        top (a producer: where it adds the bias; CPU mode): the plan fuses a ReLU into the
        producer of a chain this way, on a layer of its own (pycaffe_cli/inference/fold.py).
        ``ReluFusingHooks`` below is what layers that can do it use."""
        raise NotImplementedError(f"{self.layer.type} layers cannot fuse a ReLU")

    @property
    def fused_relu_slope(self):
        """The negative slope of the ReLU ``fuse_relu`` set, or None."""
        return None

    def special_path(self):
        """The ``SpecialPath`` the forward-only pass takes with the current shapes and
        weights, for the plan's summary line ("ran 2 Convolution layers as Winograd F(4x4,
        3x3)") and its accuracy report; None where it computes what ``forward`` does."""
        return None


class ReluFusingHooks(InferenceHooks):
    """Hooks of a layer the plan can fuse a ReLU into (Convolution, Deconvolution,
    InnerProduct, Eltwise, Scale): the slope lives on the layer, as ``_fused_relu_slope`` (None:
    no ReLU), which the layer's CPU forward applies where it writes its top."""

    def fuse_relu(self, negative_slope):
        self.layer._fused_relu_slope = negative_slope

    @property
    def fused_relu_slope(self):
        return self.layer._fused_relu_slope
