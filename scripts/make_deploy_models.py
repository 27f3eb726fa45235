#!/usr/bin/env python3
"""Write the deploy prototxts of ResNet-50, SqueezeNet 1.1 and MobileNet v2 into models/.

Each net is described by a small table (blocks, widths, strides) instead of thousands of lines
of prototxt. Layer and blob names are those of the published models, so their .caffemodel
weights load by name:

* ``models/resnet50/deploy.prototxt``: Kaiming He's ResNet-50-deploy (deep-residual-networks):
  bottleneck blocks ``res2a`` ... ``res5c``, each conv followed by an in-place BatchNorm
  (``bn2a_branch2a``, use_global_stats) and Scale (``scale2a_branch2a``, bias_term); the
  stride sits on the first 1x1 conv of a stage; only ``conv1`` has a bias (the published
  weights hold one); ``pool5`` (7x7 average), ``fc1000``, ``prob``.
* ``models/squeezenet1.1/deploy.prototxt``: forresti's SqueezeNet v1.1 deploy: ``conv1`` 3x3/2,
  fire modules ``fire2`` ... ``fire9`` (squeeze1x1, expand1x1, expand3x3, concat), ``drop9``,
  ``conv10``, global average ``pool10``, ``prob``; input 227x227.
* ``models/mobilenet_v2/deploy.prototxt``: shicai's mobilenet_v2_deploy (MobileNet-Caffe):
  inverted residual blocks ``conv2_1`` ... ``conv6_3`` (expand / dwise / linear, each conv
  without bias and followed by BatchNorm ``.../bn`` and an in-place Scale ``.../scale``; ReLU,
  not ReLU6, after expand and dwise), Eltwise ``block_3_1`` ... where shapes allow, ``conv6_4``
  (1280), global average ``pool6``, ``fc7`` (a 1x1 Convolution), ``prob``. The depthwise
  convs are Convolution layers with ``group`` == ``num_output``. The strides are shicai's
  (2 at conv4_7 rather than at conv4_3, following the first arXiv version of the paper).

Every net takes one image (batch 1) through an Input layer; ``pycaffe time --batch N`` times
another batch size without editing the file.
Usage: scripts/make_deploy_models.py [--out-dir models]
"""
import argparse
import os

from pycaffe_cli.io.files import atomic_write

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- prototxt text ---------------------------------------------------------------------------
def layer(name, kind, bottoms, top, body=""):
    lines = [f'  name: "{name}"', f'  type: "{kind}"']
    lines += [f'  bottom: "{b}"' for b in bottoms] + [f'  top: "{top}"']
    return "layer {\n" + "\n".join(lines) + (f"\n  {body}" if body else "") + "\n}\n"


def input_layer(size):
    return layer("data", "Input", [], "data",
                 f"input_param {{ shape {{ dim: 1 dim: 3 dim: {size} dim: {size} }} }}")


def conv(name, bottom, num_output, kernel, stride=1, pad=0, bias=True, group=1, top=None,
         engine=False):
    fields = [f"num_output: {num_output}"] + ([] if bias else ["bias_term: false"])
    fields += [f"pad: {pad}"] if pad else []
    fields += [f"kernel_size: {kernel}"]
    fields += [f"group: {group}"] if group > 1 else []
    fields += [f"stride: {stride}"] if stride > 1 else []
    fields += ["engine: CAFFE"] if engine else []
    return layer(name, "Convolution", [bottom], top or name,
                 "convolution_param { " + " ".join(fields) + " }")


def relu(name, blob):
    return layer(name, "ReLU", [blob], blob)


def batch_norm(name, bottom, top, eps=None):
    extra = f" eps: {eps}" if eps else ""
    return layer(name, "BatchNorm", [bottom], top,
                 f"batch_norm_param {{ use_global_stats: true{extra} }}")


def scale(name, blob):
    return layer(name, "Scale", [blob], blob, "scale_param { bias_term: true }")


def pool(name, bottom, kind, kernel=None, stride=1):
    if kernel is None:
        return layer(name, "Pooling", [bottom], name,
                     f"pooling_param {{ pool: {kind} global_pooling: true }}")
    return layer(name, "Pooling", [bottom], name,
                 f"pooling_param {{ pool: {kind} kernel_size: {kernel} stride: {stride} }}")


def eltwise(name, bottoms):
    return layer(name, "Eltwise", bottoms, name)


def softmax(bottom):
    return layer("prob", "Softmax", [bottom], "prob")


# --- ResNet-50 -------------------------------------------------------------------------------
# stage: (blocks, bottleneck width, output width, stride of the first block)
RESNET50 = {2: (3, 64, 256, 1), 3: (4, 128, 512, 2), 4: (6, 256, 1024, 2),
            5: (3, 512, 2048, 2)}


def resnet_unit(block, branch, bottom, num_output, kernel, stride=1, with_relu=True):
    """res<block>_<branch>: conv, in-place bn<block>_<branch> and scale<block>_<branch>."""
    name = f"res{block}_{branch}"
    text = conv(name, bottom, num_output, kernel, stride, pad=kernel // 2, bias=False)
    text += batch_norm(f"bn{block}_{branch}", name, name) + scale(f"scale{block}_{branch}", name)
    return text + (relu(f"{name}_relu", name) if with_relu else "")


def resnet_block(block, bottom, width, out, stride, projection):
    text = ""
    shortcut = bottom
    if projection:
        text += resnet_unit(block, "branch1", bottom, out, 1, stride, with_relu=False)
        shortcut = f"res{block}_branch1"
    text += resnet_unit(block, "branch2a", bottom, width, 1, stride)
    text += resnet_unit(block, "branch2b", f"res{block}_branch2a", width, 3)
    text += resnet_unit(block, "branch2c", f"res{block}_branch2b", out, 1, with_relu=False)
    name = f"res{block}"
    return text + eltwise(name, [shortcut, f"{name}_branch2c"]) + relu(f"{name}_relu", name)


def resnet50():
    text = 'name: "ResNet-50"\n' + input_layer(224)
    text += conv("conv1", "data", 64, 7, stride=2, pad=3)   # the one conv with a bias
    text += batch_norm("bn_conv1", "conv1", "conv1") + scale("scale_conv1", "conv1")
    text += relu("conv1_relu", "conv1") + pool("pool1", "conv1", "MAX", 3, 2)
    top = "pool1"
    for stage, (blocks, width, out, stride) in RESNET50.items():
        for i in range(blocks):
            block = f"{stage}{'abcdef'[i]}"
            text += resnet_block(block, top, width, out, stride if i == 0 else 1, i == 0)
            top = f"res{block}"
    text += pool("pool5", top, "AVE", 7, 1)
    text += layer("fc1000", "InnerProduct", ["pool5"], "fc1000",
                  "inner_product_param { num_output: 1000 }")
    return text + softmax("fc1000")


# --- SqueezeNet 1.1 --------------------------------------------------------------------------
# fire module: (squeeze width, expand width); a 3x3/2 max pool follows fire3 and fire5.
SQUEEZENET11 = {2: (16, 64), 3: (16, 64), 4: (32, 128), 5: (32, 128), 6: (48, 192),
                7: (48, 192), 8: (64, 256), 9: (64, 256)}
SQUEEZENET_POOL_AFTER = {3: "pool3", 5: "pool5"}


def fire(number, bottom):
    squeeze, expand = SQUEEZENET11[number]
    p = f"fire{number}"
    text = conv(f"{p}/squeeze1x1", bottom, squeeze, 1) + relu(f"{p}/relu_squeeze1x1",
                                                              f"{p}/squeeze1x1")
    text += conv(f"{p}/expand1x1", f"{p}/squeeze1x1", expand, 1)
    text += relu(f"{p}/relu_expand1x1", f"{p}/expand1x1")
    text += conv(f"{p}/expand3x3", f"{p}/squeeze1x1", expand, 3, pad=1)
    text += relu(f"{p}/relu_expand3x3", f"{p}/expand3x3")
    return text + layer(f"{p}/concat", "Concat", [f"{p}/expand1x1", f"{p}/expand3x3"],
                        f"{p}/concat"), f"{p}/concat"


def squeezenet11():
    text = 'name: "SqueezeNet_v1.1"\n' + input_layer(227)
    text += conv("conv1", "data", 64, 3, stride=2) + relu("relu_conv1", "conv1")
    text += pool("pool1", "conv1", "MAX", 3, 2)
    top = "pool1"
    for number in SQUEEZENET11:
        block, top = fire(number, top)
        text += block
        if number in SQUEEZENET_POOL_AFTER:
            text += pool(SQUEEZENET_POOL_AFTER[number], top, "MAX", 3, 2)
            top = SQUEEZENET_POOL_AFTER[number]
    text += layer("drop9", "Dropout", [top], top, "dropout_param { dropout_ratio: 0.5 }")
    text += conv("conv10", top, 1000, 1) + relu("relu_conv10", "conv10")
    return text + pool("pool10", "conv10", "AVE") + softmax("pool10")


# --- MobileNet v2 ----------------------------------------------------------------------------
# block: (expansion width, output width, depthwise stride), in shicai's order and strides.
MOBILENET_V2 = {
    "2_1": (32, 16, 1), "2_2": (96, 24, 2), "3_1": (144, 24, 1), "3_2": (144, 32, 2),
    "4_1": (192, 32, 1), "4_2": (192, 32, 1), "4_3": (192, 64, 1), "4_4": (384, 64, 1),
    "4_5": (384, 64, 1), "4_6": (384, 64, 1), "4_7": (384, 96, 2), "5_1": (576, 96, 1),
    "5_2": (576, 96, 1), "5_3": (576, 160, 2), "6_1": (960, 160, 1), "6_2": (960, 160, 1),
    "6_3": (960, 320, 1),
}


def mobilenet_unit(name, bottom, num_output, kernel, stride=1, group=1, relu_name=None):
    """conv ``name`` (no bias), BatchNorm into ``name/bn``, in-place Scale, optional ReLU."""
    text = conv(name, bottom, num_output, kernel, stride, pad=kernel // 2, bias=False,
                group=group, engine=group > 1)
    text += batch_norm(f"{name}/bn", name, f"{name}/bn", eps="1e-5")
    text += scale(f"{name}/scale", f"{name}/bn")
    return text + (relu(relu_name, f"{name}/bn") if relu_name else "")


def mobilenet_block(block, bottom, channels):
    expand, out, stride = MOBILENET_V2[block]
    p = f"conv{block}"
    text = mobilenet_unit(f"{p}/expand", bottom, expand, 1, relu_name=f"relu{block}/expand")
    text += mobilenet_unit(f"{p}/dwise", f"{p}/expand/bn", expand, 3, stride, group=expand,
                           relu_name=f"relu{block}/dwise")
    text += mobilenet_unit(f"{p}/linear", f"{p}/dwise/bn", out, 1)
    top = f"{p}/linear/bn"
    if stride == 1 and channels == out:
        text += eltwise(f"block_{block}", [bottom, top])
        top = f"block_{block}"
    return text, top, out


def mobilenet_v2():
    text = 'name: "MOBILENET_V2"\n' + input_layer(224)
    text += mobilenet_unit("conv1", "data", 32, 3, stride=2, relu_name="relu1")
    top, channels = "conv1/bn", 32
    for block in MOBILENET_V2:
        block_text, top, channels = mobilenet_block(block, top, channels)
        text += block_text
    text += mobilenet_unit("conv6_4", top, 1280, 1, relu_name="relu6_4")
    text += pool("pool6", "conv6_4/bn", "AVE") + conv("fc7", "pool6", 1000, 1)
    return text + softmax("fc7")


# --- files -----------------------------------------------------------------------------------
MODELS = {
    "resnet50": (resnet50, "ResNet-50 (He et al. 2015), after KaimingHe/deep-residual-networks "
                           "ResNet-50-deploy.prototxt"),
    "squeezenet1.1": (squeezenet11, "SqueezeNet v1.1 (Iandola et al. 2016), after "
                                    "forresti/SqueezeNet SqueezeNet_v1.1/deploy.prototxt"),
    "mobilenet_v2": (mobilenet_v2, "MobileNet v2 (Sandler et al. 2018), after "
                                   "shicai/MobileNet-Caffe mobilenet_v2_deploy.prototxt"),
}


def write_nets(out_dir, nets, script, note=""):
    """Write each of ``nets`` ({path under out_dir: (build function, source)}) with a header
    naming its source and ``script``; return the paths written."""
    paths = []
    for relative, (build, source) in nets.items():
        path = os.path.join(out_dir, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with atomic_write(path, "w") as f:
            f.write(f"# {source}.\n# Written by scripts/{script}; layer names match the "
                    f"published weights.\n{note}" + build())
        paths.append(path)
    return paths


def write_models(out_dir):
    """Write every model's deploy.prototxt under ``out_dir``; return the paths written."""
    return write_nets(out_dir, {f"{name}/deploy.prototxt": entry
                                for name, entry in MODELS.items()}, "make_deploy_models.py")


def main(write=None, doc=None):
    """Write the nets under --out-dir (models/) with ``write`` (default: this script's
    write_models); ``doc`` is the calling script's docstring."""
    parser = argparse.ArgumentParser(description=(doc or __doc__).splitlines()[0])
    parser.add_argument("--out-dir", default=os.path.join(ROOT, "models"))
    args = parser.parse_args()
    for path in (write or write_models)(args.out_dir):
        print(path)


if __name__ == "__main__":
    main()
