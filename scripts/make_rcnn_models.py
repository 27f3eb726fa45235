#!/usr/bin/env python3
"""Write the test nets of Faster R-CNN (ZF) and R-FCN (ResNet-50) into models/.

Layer and blob names are those of the published prototxts, so the published .caffemodel
weights load by name:

* ``models/faster_rcnn_zf/test.prototxt``: py-faster-rcnn's
  models/pascal_voc/ZF/faster_rcnn_end2end/test.prototxt (PASCAL VOC, 21 classes): ZF's
  ``conv1`` ... ``conv5`` (with LRN ``norm1``/``norm2`` and padded max pools), the RPN
  (``rpn_conv/3x3`` into blob ``rpn/output``, ``rpn_cls_score``, ``rpn_bbox_pred``, the
  reshape / softmax / reshape to ``rpn_cls_prob_reshape``), the Python ``proposal`` layer
  (``rpn.proposal_layer``) giving ``rois``, ``roi_pool_conv5`` (ROIPooling 6x6, 1/16),
  ``fc6``/``fc7`` with Dropout (``scale_train: false``), ``cls_score``, ``bbox_pred`` (84:
  a box per class) and ``cls_prob``.
* ``models/rfcn_resnet50/test_agnostic.prototxt``: py-R-FCN's
  models/pascal_voc/ResNet-50/rfcn_end2end/test_agnostic.prototxt: ResNet-50 ``conv1`` ...
  ``res5c`` (BatchNorm + Scale after every conv; ``res5`` keeps stride 16 with stride 1 and
  dilation 2 in its 3x3 convs), the RPN on ``res4f``, ``proposal``, ``conv_new_1``,
  ``rfcn_cls`` (21 x 7 x 7 score maps) and ``rfcn_bbox`` (class-agnostic: 2 x 4 x 7 x 7),
  PSROIPooling ``psroipooled_cls_rois`` / ``psroipooled_loc_rois``, 7x7 average pooling,
  ``cls_prob`` (R, 21) and ``bbox_pred`` (R, 8).

Both nets take ``data`` (1, 3, 224, 224) and ``im_info`` (1, 3: height, width, scale) as
the published files declare them; reshape ``data`` to the image's size before forward. The
``proposal`` layer needs ``models/faster_rcnn/python`` on PYTHONPATH.
Usage: scripts/make_rcnn_models.py [--out-dir models]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_deploy_models import main, write_nets  # noqa: E402  (the sibling script's writer)


# --- prototxt text ---------------------------------------------------------------------------
class Enum(str):
    """A protobuf enum value: written bare (``pool: MAX``), not quoted."""


def field(key, value, indent):
    """One ``key: value`` line, or a ``key { ... }`` block for a list of (key, value)."""
    pad = "  " * indent
    if isinstance(value, list):
        inner = "".join(field(k, v, indent + 1) for k, v in value)
        return f"{pad}{key} {{\n{inner}{pad}}}\n"
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, Enum):
        text = str(value)
    elif isinstance(value, str):
        text = f'"{value}"'
    else:
        text = repr(value)
    return f"{pad}{key}: {text}\n"


def layer(name, kind, bottoms, tops, *body):
    """A ``layer { ... }`` block; ``body`` holds further (key, value) pairs."""
    pairs = [("name", name), ("type", kind)] + [("bottom", b) for b in bottoms]
    pairs += [("top", t) for t in ([tops] if isinstance(tops, str) else tops)]
    return field("layer", pairs + list(body), 0)


def inputs(name, image_size=224):
    """The net's name and its two inputs, declared the old way (``input`` and
    ``input_shape``) as the published test nets do."""
    text = f'name: "{name}"\n'
    for blob, dims in (("data", (1, 3, image_size, image_size)), ("im_info", (1, 3))):
        text += f'input: "{blob}"\n' + field("input_shape", [("dim", d) for d in dims], 0)
    return text


def lr(*mults, decay=None):
    """``param { lr_mult ... }`` blocks, one per learnable blob."""
    blocks = []
    for mult in mults:
        pairs = [("lr_mult", float(mult))]
        if decay is not None:
            pairs.append(("decay_mult", float(decay)))
        blocks.append(("param", pairs))
    return blocks


GAUSSIAN = [("weight_filler", [("type", "gaussian"), ("std", 0.01)]),
            ("bias_filler", [("type", "constant"), ("value", 0)])]


def conv(name, bottom, num_output, kernel, stride=1, pad=0, dilation=1, bias=True,
         fillers=False, top=None, params=()):
    fields = [("num_output", num_output), ("kernel_size", kernel)]
    fields += [("dilation", dilation)] if dilation > 1 else []
    fields += [("pad", pad), ("stride", stride)] + ([] if bias else [("bias_term", False)])
    fields += GAUSSIAN if fillers else []
    return layer(name, "Convolution", [bottom], top or name, ("convolution_param", fields),
                 *params)


def relu(name, blob):
    return layer(name, "ReLU", [blob], blob)


def max_pool(name, bottom, kernel, stride, pad=0):
    fields = [("kernel_size", kernel), ("stride", stride)] + ([("pad", pad)] if pad else [])
    return layer(name, "Pooling", [bottom], name, ("pooling_param", fields +
                                                    [("pool", Enum("MAX"))]))


def reshape(name, bottom, top, dims):
    return layer(name, "Reshape", [bottom], top,
                 ("reshape_param", [("shape", [("dim", d) for d in dims])]))


def inner_product(name, bottom, num_output):
    return layer(name, "InnerProduct", [bottom], name,
                 ("inner_product_param", [("num_output", num_output)]))


# --- the region proposal network, shared by both nets -----------------------------------------
ANCHORS = 9   # 3 ratios x 3 scales (rpn/generate_anchors.py)


def rpn(bottom, width, params=()):
    """``rpn_conv/3x3`` ... ``proposal``: the RPN head on ``bottom`` and the Python proposal
    layer, ending in the blob ``rois``."""
    text = conv("rpn_conv/3x3", bottom, width, 3, pad=1, fillers=True, top="rpn/output",
                params=params)
    text += relu("rpn_relu/3x3", "rpn/output")
    text += conv("rpn_cls_score", "rpn/output", 2 * ANCHORS, 1, fillers=True, params=params)
    text += conv("rpn_bbox_pred", "rpn/output", 4 * ANCHORS, 1, fillers=True, params=params)
    text += reshape("rpn_cls_score_reshape", "rpn_cls_score", "rpn_cls_score_reshape",
                    (0, 2, -1, 0))
    text += layer("rpn_cls_prob", "Softmax", ["rpn_cls_score_reshape"], "rpn_cls_prob")
    text += reshape("rpn_cls_prob_reshape", "rpn_cls_prob", "rpn_cls_prob_reshape",
                    (0, 2 * ANCHORS, -1, 0))
    return text + layer("proposal", "Python",
                        ["rpn_cls_prob_reshape", "rpn_bbox_pred", "im_info"], "rois",
                        ("python_param", [("module", "rpn.proposal_layer"),
                                          ("layer", "ProposalLayer"),
                                          ("param_str", "'feat_stride': 16")]))


# --- Faster R-CNN, ZF ------------------------------------------------------------------------
# conv: (num_output, kernel, stride, pad, followed by LRN + max pool)
ZF = {1: (96, 7, 2, 3, True), 2: (256, 5, 2, 2, True), 3: (384, 3, 1, 1, False),
      4: (384, 3, 1, 1, False), 5: (256, 3, 1, 1, False)}
VOC_CLASSES = 21   # 20 PASCAL VOC classes and the background


def lrn(name, bottom):
    return layer(name, "LRN", [bottom], name, ("lrn_param", [
        ("local_size", 3), ("alpha", 0.00005), ("beta", 0.75),
        ("norm_region", Enum("WITHIN_CHANNEL")), ("engine", Enum("CAFFE"))]))


def dropout(name, blob):
    return layer(name, "Dropout", [blob], blob, ("dropout_param", [
        ("dropout_ratio", 0.5), ("scale_train", False)]))


def faster_rcnn_zf():
    text = inputs("ZF")
    top = "data"
    for number, (width, kernel, stride, pad, pooled) in ZF.items():
        text += conv(f"conv{number}", top, width, kernel, stride, pad)
        text += relu(f"relu{number}", f"conv{number}")
        top = f"conv{number}"
        if pooled:
            text += lrn(f"norm{number}", top)
            text += max_pool(f"pool{number}", f"norm{number}", 3, 2, pad=1)
            top = f"pool{number}"
    text += rpn("conv5", 256)
    text += layer("roi_pool_conv5", "ROIPooling", ["conv5", "rois"], "roi_pool_conv5",
                  ("roi_pooling_param", [("pooled_w", 6), ("pooled_h", 6),
                                         ("spatial_scale", 0.0625)]))
    top = "roi_pool_conv5"
    for number in (6, 7):
        text += inner_product(f"fc{number}", top, 4096)
        text += relu(f"relu{number}", f"fc{number}") + dropout(f"drop{number}", f"fc{number}")
        top = f"fc{number}"
    text += inner_product("cls_score", top, VOC_CLASSES)
    text += inner_product("bbox_pred", top, 4 * VOC_CLASSES)
    return text + layer("cls_prob", "Softmax", ["cls_score"], "cls_prob", ("loss_param", [
        ("ignore_label", -1), ("normalize", True)]))


# --- R-FCN, ResNet-50 ------------------------------------------------------------------------
# stage: (blocks, bottleneck width, output width, stride of the first block, dilation of the
# 3x3 convs, lr_mult of the convs). res5 keeps the stride at 16 and dilates instead.
RESNET50 = {2: (3, 64, 256, 1, 1, 0.0), 3: (4, 128, 512, 2, 1, 1.0),
            4: (6, 256, 1024, 2, 1, 1.0), 5: (3, 512, 2048, 1, 2, 1.0)}
FROZEN = dict(decay=0.0)   # BatchNorm's and Scale's blobs: lr_mult and decay_mult 0
GROUP = 7                  # position-sensitive score maps: GROUP x GROUP cells


def batch_norm_scale(block, branch, blob):
    """In-place ``bn<block>_<branch>`` (global statistics) and ``scale<block>_<branch>``."""
    text = layer(f"bn{block}_{branch}", "BatchNorm", [blob], blob,
                 ("batch_norm_param", [("use_global_stats", True)]), *lr(0, 0, 0, **FROZEN))
    return text + layer(f"scale{block}_{branch}", "Scale", [blob], blob,
                        ("scale_param", [("bias_term", True)]), *lr(0, 0, **FROZEN))


def resnet_unit(block, branch, bottom, width, kernel, stride, dilation, mult, with_relu):
    """res<block>_<branch>: conv (no bias), BatchNorm, Scale and optionally ReLU."""
    name = f"res{block}_{branch}"
    text = conv(name, bottom, width, kernel, stride, pad=dilation * (kernel // 2),
                dilation=dilation if kernel > 1 else 1, bias=False, params=lr(mult))
    text += batch_norm_scale(block, branch, name)
    return text + (relu(f"{name}_relu", name) if with_relu else "")


def resnet_block(block, bottom, stage, first):
    _, width, out, stride, dilation, mult = RESNET50[stage]
    stride = stride if first else 1
    text = ""
    shortcut = bottom
    if first:
        text += resnet_unit(block, "branch1", bottom, out, 1, stride, 1, mult, False)
        shortcut = f"res{block}_branch1"
    text += resnet_unit(block, "branch2a", bottom, width, 1, stride, 1, mult, True)
    text += resnet_unit(block, "branch2b", f"res{block}_branch2a", width, 3, 1, dilation, mult,
                        True)
    text += resnet_unit(block, "branch2c", f"res{block}_branch2b", out, 1, 1, 1, mult, False)
    name = f"res{block}"
    text += layer(name, "Eltwise", [shortcut, f"{name}_branch2c"], name)
    return text + relu(f"{name}_relu", name)


def psroi_head(kind, maps, output_dim, top):
    """PSROIPooling of ``maps`` over ``rois`` and a GROUP x GROUP average: one value per
    output channel and RoI."""
    pooled = f"psroipooled_{kind}_rois"
    text = layer(pooled, "PSROIPooling", [maps, "rois"], pooled, ("psroi_pooling_param", [
        ("spatial_scale", 0.0625), ("output_dim", output_dim), ("group_size", GROUP)]))
    return text + layer(f"ave_{top}_rois", "Pooling", [pooled], top, ("pooling_param", [
        ("pool", Enum("AVE")), ("kernel_size", GROUP), ("stride", GROUP)]))


def new_conv(name, bottom, num_output):
    fields = [("num_output", num_output), ("kernel_size", 1), ("pad", 0)] + GAUSSIAN
    return layer(name, "Convolution", [bottom], name, ("convolution_param", fields),
                 *lr(1, 2))


def rfcn_resnet50():
    text = inputs("ResNet50")
    text += conv("conv1", "data", 64, 7, stride=2, pad=3, params=lr(0, 0))
    text += batch_norm_scale("", "conv1", "conv1")   # bn_conv1, scale_conv1
    text += relu("conv1_relu", "conv1") + max_pool("pool1", "conv1", 3, 2)
    top = "pool1"
    for stage, (blocks, *_) in RESNET50.items():
        for i in range(blocks):
            block = f"{stage}{'abcdef'[i]}"
            text += resnet_block(block, top, stage, i == 0)
            top = f"res{block}"
    text += rpn("res4f", 512, params=lr(1, decay=1) + lr(2, decay=0))
    text += new_conv("conv_new_1", top, 1024) + relu("conv_new_1_relu", "conv_new_1")
    text += new_conv("rfcn_cls", "conv_new_1", VOC_CLASSES * GROUP * GROUP)
    text += new_conv("rfcn_bbox", "conv_new_1", 2 * 4 * GROUP * GROUP)
    text += psroi_head("cls", "rfcn_cls", VOC_CLASSES, "cls_score")
    text += psroi_head("loc", "rfcn_bbox", 2 * 4, "bbox_pred_pre")
    text += layer("cls_prob", "Softmax", ["cls_score"], "cls_prob_pre")
    text += reshape("cls_prob_reshape", "cls_prob_pre", "cls_prob", (-1, VOC_CLASSES))
    return text + reshape("bbox_pred_reshape", "bbox_pred_pre", "bbox_pred", (-1, 2 * 4))


# --- files -----------------------------------------------------------------------------------
MODELS = {
    "faster_rcnn_zf/test.prototxt": (
        faster_rcnn_zf, "Faster R-CNN, ZF, PASCAL VOC (Ren et al. 2015), after "
                        "rbgirshick/py-faster-rcnn models/pascal_voc/ZF/faster_rcnn_end2end/"
                        "test.prototxt"),
    "rfcn_resnet50/test_agnostic.prototxt": (
        rfcn_resnet50, "R-FCN, ResNet-50, PASCAL VOC, class-agnostic boxes (Dai et al. 2016), "
                       "after YuwenXiong/py-R-FCN models/pascal_voc/ResNet-50/rfcn_end2end/"
                       "test_agnostic.prototxt"),
}


def write_models(out_dir):
    """Write both test nets under ``out_dir``; return the paths written."""
    return write_nets(out_dir, MODELS, "make_rcnn_models.py",
                      "# The proposal layer needs models/faster_rcnn/python on PYTHONPATH.\n")


if __name__ == "__main__":
    main(write_models, __doc__)
