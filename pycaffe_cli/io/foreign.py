"""Fields, enum values and layer types of other Caffe forks, with their BVLC equivalents.

Prototxts written for SSD, Fast/Faster R-CNN, DeepLab, SegNet, PSPNet, YOLO ports, NVIDIA's
or Intel's Caffe, or converted from PyTorch and Caffe2, use names BVLC Caffe never had.
Protobuf only says "has no field named ..." and the registry "unknown layer type"; these
tables add where the name comes from and what BVLC Caffe writes instead (or that it has no
such layer).

The schemas of SSD, Fast/Faster R-CNN and R-FCN are part of pycaffe's own (proto/caffe.proto),
so their files parse. Their layers register with ``fork=`` one of SSD, FAST_RCNN, RFCN (the
same words LAYER_TYPES holds for them, which ``pycaffe layers`` prints); a type of LAYER_TYPES
that is not registered is refused in the registry's unknown-type error. An option those forks
add to BVLC's own messages that pycaffe does not implement yet is refused by
``unimplemented_option`` (UNIMPLEMENTED); whoever implements one removes its entry, or, when
only some layer types implement it, lists them in IMPLEMENTED_BY.
"""
import re

from google.protobuf.descriptor import FieldDescriptor

from pycaffe_cli.proto import caffe_pb2

SSD = "SSD's Caffe fork (weiliu89/caffe, branch ssd)"
FAST_RCNN = "Fast/Faster R-CNN's Caffe fork (rbgirshick/caffe-fast-rcnn)"
RFCN = "R-FCN's Caffe forks (daijifeng001/caffe-rfcn, py-R-FCN's Microsoft/caffe)"
_MOBILENET = "MobileNet Caffe ports"
_DEPTHWISE = "a Convolution layer with group equal to its input channels"
_NVCAFFE = ("is NVIDIA Caffe's mixed precision; BVLC Caffe computes in float32, so delete "
            "the line")
_NO_BVLC = "BVLC Caffe has no such layer"

# layer type -> (where it comes from, its parameter field or None, BVLC equivalent or None)
LAYER_TYPES = {
    "Normalize": (SSD, "norm_param", None),
    "PriorBox": (SSD, "prior_box_param", None),
    "Permute": (SSD, "permute_param", None),
    "DetectionOutput": (SSD, "detection_output_param", None),
    "DetectionEvaluate": (SSD, "detection_evaluate_param", None),
    "MultiBoxLoss": (SSD, "multibox_loss_param", None),
    "AnnotatedData": (SSD, "annotated_data_param", "a Data layer (without the boxes)"),
    "VideoData": (SSD, "video_data_param", None),
    "ROIPooling": (FAST_RCNN, "roi_pooling_param", None),
    "SmoothL1Loss": (FAST_RCNN, "smooth_l1_loss_param", None),
    "PSROIPooling": (RFCN, "psroi_pooling_param", None),
    "BoxAnnotatorOHEM": (RFCN, "box_annotator_ohem_param", None),
    "SoftmaxWithLossOHEM": (RFCN, None, None),
    "SmoothL1LossOHEM": (RFCN, None, None),
    "Interp": ("DeepLab's and PSPNet's Caffe forks", "interp_param",
               'a Deconvolution layer with weight_filler { type: "bilinear" }'),
    "BN": ("SegNet's and PSPNet's Caffe forks", "bn_param",
           "a BatchNorm layer followed by a Scale layer with bias_term: true"),
    "Upsample": ("SegNet's and YOLOv3's Caffe ports", "upsample_param",
                 "for nearest-neighbour upsampling a Deconvolution layer with group equal to "
                 "the channels, kernel_size and stride equal to the scale, a constant "
                 "weight_filler of 1 and lr_mult: 0"),
    "ReLU6": (_MOBILENET, None, "a Clip layer with clip_param { min: 0 max: 6 }"),
    "DepthwiseConvolution": (_MOBILENET, None, _DEPTHWISE),
    "ConvolutionDepthwise": (_MOBILENET, None, _DEPTHWISE),
    "ShuffleChannel": ("ShuffleNet Caffe ports", "shuffle_channel_param", None),
    "Reorg": ("YOLOv2 Caffe ports", "reorg_param", None),
}

# (message, field) -> hint. Messages are named without the "caffe." package; the V1 message
# shares the LayerParameter entries.
FIELDS = {
    ("PoolingParameter", "ceil_mode"):
        "ceil_mode is from other Caffe forks and converted nets; BVLC Caffe writes "
        "round_mode: FLOOR (ceil_mode: false) or round_mode: CEIL (ceil_mode: true, the "
        "default)",
    ("ConvolutionParameter", "hole"):
        "hole is DeepLab's name for what BVLC Caffe calls dilation",
    ("ConvolutionParameter", "hole_h"):
        "hole_h is DeepLab's name for what BVLC Caffe calls dilation (one value per axis)",
    ("ConvolutionParameter", "hole_w"):
        "hole_w is DeepLab's name for what BVLC Caffe calls dilation (one value per axis)",
    ("LayerParameter", "engine"):
        "a layer-level engine is Intel Caffe's; BVLC Caffe chooses engines inside the "
        "layer's own parameters (convolution_param { engine: CAFFE }), so delete the line",
    ("DetectionOutputParameter", "normalized_bbox"):
        "normalized_bbox is OpenCV's (its field 10, which SSD's Caffe fork gives visualize); "
        "SSD's DetectionOutput takes normalized boxes only, so delete the line",
}
for _name in ("offset_h", "offset_w", "width", "height"):
    FIELDS[("PriorBoxParameter", _name)] = (
        f"{_name} is OpenCV's explicit prior geometry; SSD's PriorBox derives its boxes from "
        "min_size, max_size, aspect_ratio, step and offset")
for _name in ("default_forward_type", "default_backward_type", "default_forward_math",
              "default_backward_math", "global_grad_scale"):
    FIELDS[("NetParameter", _name)] = f"{_name} {_NVCAFFE}"
for _name in ("forward_type", "backward_type", "forward_math", "backward_math"):
    FIELDS[("LayerParameter", _name)] = f"{_name} {_NVCAFFE}"
_LAYER_FIELDS = caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name
for _type, (_source, _field, _instead) in LAYER_TYPES.items():
    if _field and _field not in _LAYER_FIELDS:
        FIELDS[("LayerParameter", _field)] = (
            f"{_field} belongs to {_type} layers, from {_source}; "
            + (f"in BVLC Caffe write {_instead}" if _instead else _NO_BVLC))

# Options SSD and R-FCN add to BVLC's own messages: in the schema, so their files parse, but
# not implemented yet, so that a net or solver using one is refused instead of run without
# it. (message, field) -> (what it is, what BVLC Caffe does instead or None) refuses a value
# other than the field's default; (message, field, value) refuses that value only.
_SSD_AUGMENTATION = (f"data augmentation from {SSD}",
                     "BVLC Caffe's transform_param has only scale, mirror, crop_size, "
                     "mean_file, mean_value, force_color and force_gray")
UNIMPLEMENTED = {
    ("TransformationParameter", "resize_param"): _SSD_AUGMENTATION,
    ("TransformationParameter", "noise_param"): _SSD_AUGMENTATION,
    ("TransformationParameter", "distort_param"): _SSD_AUGMENTATION,
    ("TransformationParameter", "expand_param"): _SSD_AUGMENTATION,
    ("TransformationParameter", "emit_constraint"): (
        f"the rule of {SSD} for which boxes of annotated data a crop keeps", None),
    ("TransformationParameter", "crop_h"): (
        f"a rectangular crop from {SSD}", "BVLC Caffe crops squares of crop_size"),
    ("TransformationParameter", "crop_w"): (
        f"a rectangular crop from {SSD}", "BVLC Caffe crops squares of crop_size"),
}

# Options of UNIMPLEMENTED that some layer types do implement: (message, field) -> those types.
# Other layer types still refuse them (SSD's own Data layer resizes, adds noise and crops
# rectangles but never distorts, expands or emits; its other data layers are not done here).
IMPLEMENTED_BY = {("TransformationParameter", _field): ("AnnotatedData",)
                  for _field in ("distort_param", "expand_param", "emit_constraint")}
IMPLEMENTED_BY.update({("TransformationParameter", _field): ("AnnotatedData", "Data")
                       for _field in ("resize_param", "noise_param", "crop_h", "crop_w")})

# (enum, value) -> hint
ENUM_VALUES = {
    ("PoolMethod", "AVG"): "BVLC Caffe spells average pooling AVE",
}

_NO_FIELD = re.compile(r'Message type "(?:caffe\.)?(\w+)" has no field named "(\w+)"')
_NO_VALUE = re.compile(r'Enum type "(?:caffe\.)?(?:\w+\.)*(\w+)" has no value named (\w+)')


def parse_error_hint(message):
    """The BVLC equivalent for a protobuf text parse error about another fork's name, or
    None when the error is about something else."""
    match = _NO_FIELD.search(message)
    if match:
        message_type, field = match.groups()
        if message_type == "V1LayerParameter":
            message_type = "LayerParameter"
        return FIELDS.get((message_type, field))
    match = _NO_VALUE.search(message)
    if match:
        return ENUM_VALUES.get(match.groups())
    return None


def layer_type_hint(type_name):
    """Where an unknown layer type comes from and its BVLC equivalent, or None."""
    if type_name not in LAYER_TYPES:
        return None
    source, _, instead = LAYER_TYPES[type_name]
    return (f"{type_name} is a layer type of {source} that pycaffe does not implement yet; "
            + (f"in BVLC Caffe write {instead}" if instead else _NO_BVLC))


def _shown(field, value):
    if field.type == FieldDescriptor.TYPE_ENUM:
        return field.enum_type.values_by_number[value].name
    if field.type == FieldDescriptor.TYPE_STRING:
        return f'"{value}"'
    return None if field.type == FieldDescriptor.TYPE_MESSAGE else f"{value:g}"


def unimplemented_option(message, layer_type=None):
    """The first option of UNIMPLEMENTED that ``message`` (a TransformationParameter,
    SolverParameter or LossParameter) sets, or None. An option IMPLEMENTED_BY lists for
    ``layer_type`` (the owning layer's type) passes.

    Returns:
        (field name, its value as a prototxt writes it or None for a message, the reason it is
        refused: one sentence naming the fork and what BVLC Caffe does instead).
    """
    name = message.DESCRIPTOR.name
    for field, value in message.ListFields():
        if field.is_repeated:
            continue
        shown = _shown(field, value)
        entry = UNIMPLEMENTED.get((name, field.name, shown and shown.strip('"')))
        if entry is None and value != field.default_value:
            entry = UNIMPLEMENTED.get((name, field.name))
        types = IMPLEMENTED_BY.get((name, field.name), ())
        if entry is not None and layer_type in types:
            continue
        if entry is not None:
            what, instead = entry
            reason = f"{what}, which pycaffe reads but does not implement yet"
            if types:
                reason = (f"{what}, which pycaffe implements only in "
                          f"{' and '.join(types)} layers, not in {layer_type} layers")
            return field.name, shown, reason + (f"; {instead}" if instead else "")
    return None


def unimplemented_layer_option(param):
    """The sentence refusing an UNIMPLEMENTED option of a caffe.LayerParameter's
    transform_param or loss_param, or None."""
    for parent in ("transform_param", "loss_param"):
        if param.HasField(parent):
            found = unimplemented_option(getattr(param, parent), param.type)
            if found:
                field, shown, reason = found
                value = f" {{ {field}: {shown} }}" if shown else f".{field}"
                return f"{parent}{value} is {reason}"
    return None
