#!/usr/bin/env python3
"""Write the deploy prototxts of three SSD detectors into models/.

Layer and blob names are those of the published models, so their .caffemodel weights load by
name. Each net ends in SSD's detection head: per source feature map a loc and a conf
convolution, each permuted to NHWC and flattened, a PriorBox; the three Concats; the conf
scores reshaped to (N, priors, classes), softmaxed and flattened; DetectionOutput
(``detection_out``: one row per detection, [image, label, score, xmin, ymin, xmax, ymax]).

* ``models/ssd_face_res10/deploy.prototxt``: OpenCV's face detector (res10_300x300_ssd,
  samples/dnn/face_detector): a ResNet-10 of pre-activation blocks ``layer_64_1`` ...
  ``layer_512_1`` (the last one dilated, not strided), extra layers ``conv6_1_h`` ...
  ``conv9_2_h``, an L2 ``conv4_3_norm`` on ``layer_256_1_bn1``; two classes, and OpenCV's
  ``clip`` on the decoded boxes.
* ``models/mobilenet_ssd/deploy.prototxt``: chuanqi305's MobileNet-SSD (VOC, 21 classes):
  MobileNet v1 ``conv0`` ... ``conv13`` (depthwise convs as grouped Convolutions, BatchNorm
  folded into the weights as published), extras ``conv14_1`` ... ``conv17_2``; 1x1 heads on
  conv11, conv13 and the extras; priors without a step (PriorBox derives it).
* ``models/vgg_ssd300/deploy.prototxt``: Wei Liu's VGG_VOC0712_SSD_300x300 (ssd_pascal.py):
  VGG-16 with ``pool5`` 3x3/1 and a dilated ``fc6``, extras ``conv6_1`` ... ``conv9_2``, the
  L2 ``conv4_3_norm``; 21 classes.

Every net takes one 300x300 image through an Input layer; ``pycaffe time --batch N`` times
another batch size.
Usage: scripts/make_ssd_models.py [--out-dir models]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_deploy_models import (  # noqa: E402  (the sibling script's prototxt writers)
    batch_norm, conv, eltwise, input_layer, layer, main, pool, relu, scale, write_nets)

VARIANCES = "variance: 0.1 variance: 0.1 variance: 0.2 variance: 0.2"


# --- SSD's detection head --------------------------------------------------------------------
def prior_box(name, source, min_size, max_size, ratios, step):
    fields = [f"min_size: {min_size}"] + ([f"max_size: {max_size}"] if max_size else [])
    fields += [f"aspect_ratio: {r}" for r in ratios]
    fields += ["flip: true", "clip: false", VARIANCES]
    fields += [f"step: {step}"] if step else []
    fields += ["offset: 0.5"]
    return layer(name, "PriorBox", [source, "data"], name,
                 "prior_box_param { " + " ".join(fields) + " }")


def head_branch(prefix, source, kind, num_output, kernel):
    """<prefix>_mbox_<kind>: a conv on the source, permuted to NHWC, flattened."""
    name = f"{prefix}_mbox_{kind}"
    text = conv(name, source, num_output, kernel, pad=kernel // 2)
    text += layer(f"{name}_perm", "Permute", [name], f"{name}_perm",
                  "permute_param { order: 0 order: 2 order: 3 order: 1 }")
    return text + layer(f"{name}_flat", "Flatten", [f"{name}_perm"], f"{name}_flat",
                        "flatten_param { axis: 1 }")


def detection_head(sources, classes, kernel, output_param):
    """The heads of every (prefix, blob, min, max, aspect ratios, step) source, the Concats,
    the conf softmax and DetectionOutput."""
    text = ""
    for prefix, blob, min_size, max_size, ratios, step in sources:
        priors = 2 + 2 * len(ratios) if max_size else 1 + 2 * len(ratios)
        text += head_branch(prefix, blob, "loc", 4 * priors, kernel)
        text += head_branch(prefix, blob, "conf", classes * priors, kernel)
        text += prior_box(f"{prefix}_mbox_priorbox", blob, min_size, max_size, ratios, step)
    for kind, axis, suffix in (("loc", 1, "_flat"), ("conf", 1, "_flat"), ("priorbox", 2, "")):
        bottoms = [f"{s[0]}_mbox_{kind}{suffix}" for s in sources]
        text += layer(f"mbox_{kind}", "Concat", bottoms, f"mbox_{kind}",
                      f"concat_param {{ axis: {axis} }}")
    text += layer("mbox_conf_reshape", "Reshape", ["mbox_conf"], "mbox_conf_reshape",
                  f"reshape_param {{ shape {{ dim: 0 dim: -1 dim: {classes} }} }}")
    text += layer("mbox_conf_softmax", "Softmax", ["mbox_conf_reshape"], "mbox_conf_softmax",
                  "softmax_param { axis: 2 }")
    text += layer("mbox_conf_flatten", "Flatten", ["mbox_conf_softmax"], "mbox_conf_flatten",
                  "flatten_param { axis: 1 }")
    return text + layer("detection_out", "DetectionOutput",
                        ["mbox_loc", "mbox_conf_flatten", "mbox_priorbox"], "detection_out",
                        f"detection_output_param {{ num_classes: {classes} share_location: true"
                        f" background_label_id: 0 {output_param} code_type: CENTER_SIZE }}")


def extras(names, bottom, widths, strides, pads, suffix="", relu_name="{}_relu"):
    """SSD's extra layers: pairs <n>_1 (1x1) and <n>_2 (3x3) with a ReLU after each."""
    text = ""
    for name, (narrow, wide), stride, pad in zip(names, widths, strides, pads):
        first, second = f"{name}_1{suffix}", f"{name}_2{suffix}"
        text += conv(first, bottom, narrow, 1) + relu(relu_name.format(f"{name}_1"), first)
        text += conv(second, first, wide, 3, stride, pad) + relu(
            relu_name.format(f"{name}_2"), second)
        bottom = second
    return text


# --- OpenCV's res10 face detector ------------------------------------------------------------
def bn_scale(bn_name, scale_name, bottom, top):
    return batch_norm(bn_name, bottom, top) + scale(scale_name, top)


def res10_block(width, bottom, conv1, conv2, expand, stride, pre, post, dilated=False):
    """One pre-activation block layer_<width>_1: the input's BatchNorm/Scale/ReLU (``pre``
    names, absent for the first block), conv1 with its BatchNorm/Scale/ReLU (``post`` names),
    conv2, the shortcut (a 1x1 ``expand`` conv where the shape changes), and the sum."""
    block = f"layer_{width}_1"
    text, source = "", bottom
    if pre:
        source = f"{block}_bn1{pre[3]}"
        text += bn_scale(pre[0], pre[1], bottom, source) + relu(pre[2], source)
    narrow = {64: 32, 128: 128, 256: 256, 512: 128}[width]
    wide = {64: 32, 128: 128, 256: 256, 512: 256}[width]
    text += conv(conv1, source, narrow, 3, stride, 1, bias=False)
    text += bn_scale(post[0], post[1], conv1, conv1) + relu(post[2], conv1)
    if dilated:
        text += layer(conv2, "Convolution", [conv1], conv2, "convolution_param { num_output: "
                      f"{wide} bias_term: false pad: 2 kernel_size: 3 dilation: 2 }}")
    else:
        text += conv(conv2, conv1, wide, 3, 1, 1, bias=False)
    shortcut = bottom
    if expand:
        text += conv(expand, source, wide, 1, stride, bias=False)
        shortcut = expand
    return text + eltwise(f"{block}_sum", [conv2, shortcut])


def res10_ssd():
    text = input_layer(300)
    text += bn_scale("data_bn", "data_scale", "data", "data_bn")
    text += conv("conv1_h", "data_bn", 32, 7, 2, 3)
    text += bn_scale("conv1_bn_h", "conv1_scale_h", "conv1_h", "conv1_h")
    text += relu("conv1_relu", "conv1_h")
    text += layer("conv1_pool", "Pooling", ["conv1_h"], "conv1_pool",
                  "pooling_param { pool: MAX kernel_size: 3 stride: 2 }")
    text += res10_block(64, "conv1_pool", "layer_64_1_conv1_h", "layer_64_1_conv2_h", None, 1,
                        None, ("layer_64_1_bn2_h", "layer_64_1_scale2_h", "layer_64_1_relu2"))
    text += res10_block(128, "layer_64_1_sum", "layer_128_1_conv1_h", "layer_128_1_conv2",
                        "layer_128_1_conv_expand_h", 2,
                        ("layer_128_1_bn1_h", "layer_128_1_scale1_h", "layer_128_1_relu1", "_h"),
                        ("layer_128_1_bn2", "layer_128_1_scale2", "layer_128_1_relu2"))
    text += res10_block(256, "layer_128_1_sum", "layer_256_1_conv1", "layer_256_1_conv2",
                        "layer_256_1_conv_expand", 2,
                        ("layer_256_1_bn1", "layer_256_1_scale1", "layer_256_1_relu1", ""),
                        ("layer_256_1_bn2", "layer_256_1_scale2", "layer_256_1_relu2"))
    text += res10_block(512, "layer_256_1_sum", "layer_512_1_conv1_h", "layer_512_1_conv2_h",
                        "layer_512_1_conv_expand_h", 1,
                        ("layer_512_1_bn1", "layer_512_1_scale1", "layer_512_1_relu1", ""),
                        ("layer_512_1_bn2_h", "layer_512_1_scale2_h", "layer_512_1_relu2"),
                        dilated=True)
    text += bn_scale("last_bn_h", "last_scale_h", "layer_512_1_sum", "layer_512_1_sum")
    text += layer("last_relu", "ReLU", ["layer_512_1_sum"], "fc7")
    text += extras(["conv6", "conv7", "conv8", "conv9"], "fc7",
                   [(128, 256), (64, 128), (64, 128), (64, 128)], [2, 2, 1, 1], [1, 1, 1, 1],
                   suffix="_h")
    text += layer("conv4_3_norm", "Normalize", ["layer_256_1_bn1"], "conv4_3_norm",
                  "norm_param { across_spatial: false scale_filler { type: \"constant\" "
                  "value: 20 } channel_shared: false }")
    sources = [("conv4_3_norm", "conv4_3_norm", 30, 60, [2], 8),
               ("fc7", "fc7", 60, 111, [2, 3], 16),
               ("conv6_2", "conv6_2_h", 111, 162, [2, 3], 32),
               ("conv7_2", "conv7_2_h", 162, 213, [2, 3], 64),
               ("conv8_2", "conv8_2_h", 213, 264, [2], 100),
               ("conv9_2", "conv9_2_h", 264, 315, [2], 300)]
    return text + detection_head(sources, 2, 3, "nms_param { nms_threshold: 0.45 top_k: 400 } "
                                 "keep_top_k: 200 confidence_threshold: 0.2 clip: true")


# --- MobileNet-SSD ---------------------------------------------------------------------------
# (pointwise width, stride of the depthwise conv) of conv1 ... conv13
MOBILENET_V1 = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1),
                (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)]


def mobilenet_ssd():
    text = input_layer(300) + conv("conv0", "data", 32, 3, 2, 1) + relu("conv0/relu", "conv0")
    bottom, channels = "conv0", 32
    for index, (width, stride) in enumerate(MOBILENET_V1, start=1):
        depthwise, pointwise = f"conv{index}/dw", f"conv{index}"
        text += conv(depthwise, bottom, channels, 3, stride, 1, group=channels, engine=True)
        text += relu(f"{depthwise}/relu", depthwise)
        text += conv(pointwise, depthwise, width, 1) + relu(f"{pointwise}/relu", pointwise)
        bottom, channels = pointwise, width
    text += extras(["conv14", "conv15", "conv16", "conv17"], "conv13",
                   [(256, 512), (128, 256), (128, 256), (64, 128)], [2, 2, 2, 2], [1, 1, 1, 1],
                   relu_name="{}/relu")
    sources = [("conv11", "conv11", 60, None, [2], None),
               ("conv13", "conv13", 105, 150, [2, 3], None),
               ("conv14_2", "conv14_2", 150, 195, [2, 3], None),
               ("conv15_2", "conv15_2", 195, 240, [2, 3], None),
               ("conv16_2", "conv16_2", 240, 285, [2, 3], None),
               ("conv17_2", "conv17_2", 285, 300, [2, 3], None)]
    return text + detection_head(sources, 21, 1, "nms_param { nms_threshold: 0.45 top_k: 100 } "
                                 "keep_top_k: 100 confidence_threshold: 0.3")


# --- VGG SSD300 ------------------------------------------------------------------------------
VGG16 = [(1, 2, 64), (2, 2, 128), (3, 3, 256), (4, 3, 512), (5, 3, 512)]


def vgg_ssd300():
    text, bottom = input_layer(300), "data"
    for stage, convs, width in VGG16:
        for index in range(1, convs + 1):
            name = f"conv{stage}_{index}"
            text += conv(name, bottom, width, 3, 1, 1) + relu(f"relu{stage}_{index}", name)
            bottom = name
        if stage < 5:
            text += pool(f"pool{stage}", bottom, "MAX", 2, 2)
            bottom = f"pool{stage}"
    text += layer("pool5", "Pooling", ["conv5_3"], "pool5",
                  "pooling_param { pool: MAX kernel_size: 3 stride: 1 pad: 1 }")
    text += layer("fc6", "Convolution", ["pool5"], "fc6", "convolution_param { num_output: "
                  "1024 pad: 6 kernel_size: 3 dilation: 6 }") + relu("relu6", "fc6")
    text += conv("fc7", "fc6", 1024, 1) + relu("relu7", "fc7")
    text += extras(["conv6", "conv7", "conv8", "conv9"], "fc7",
                   [(256, 512), (128, 256), (128, 256), (128, 256)], [2, 2, 1, 1], [1, 1, 0, 0])
    text += layer("conv4_3_norm", "Normalize", ["conv4_3"], "conv4_3_norm",
                  "norm_param { across_spatial: false scale_filler { type: \"constant\" "
                  "value: 20 } channel_shared: false }")
    sources = [("conv4_3_norm", "conv4_3_norm", 30, 60, [2], 8),
               ("fc7", "fc7", 60, 111, [2, 3], 16),
               ("conv6_2", "conv6_2", 111, 162, [2, 3], 32),
               ("conv7_2", "conv7_2", 162, 213, [2, 3], 64),
               ("conv8_2", "conv8_2", 213, 264, [2], 100),
               ("conv9_2", "conv9_2", 264, 315, [2], 300)]
    return text + detection_head(sources, 21, 3, "nms_param { nms_threshold: 0.45 top_k: 400 } "
                                 "keep_top_k: 200 confidence_threshold: 0.01")


MODELS = {
    "ssd_face_res10": (res10_ssd, "OpenCV's res10_300x300_ssd face detector"),
    "mobilenet_ssd": (mobilenet_ssd, "chuanqi305's MobileNet-SSD (VOC0712)"),
    "vgg_ssd300": (vgg_ssd300, "Wei Liu's VGG_VOC0712_SSD_300x300"),
}


def write_models(out_dir):
    """Write every model's deploy.prototxt under ``out_dir``; return the paths written."""
    return write_nets(out_dir, {f"{name}/deploy.prototxt": entry
                                for name, entry in MODELS.items()}, "make_ssd_models.py")


if __name__ == "__main__":
    main(write_models, __doc__)
