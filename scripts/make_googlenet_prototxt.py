#!/usr/bin/env python3
"""Write models/googlenet/deploy.prototxt: GoogLeNet (Szegedy et al. 2014) for inference.

The net is nine inception modules between a conv/pool stem and an average-pool classifier; the
table below gives each module's branch widths, which is easier to check than 2,000 lines of
prototxt. Layer names follow the BVLC GoogLeNet model's, so its weights load by name.
"""
import argparse

from pycaffe_cli.io.files import atomic_write

# module: (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection)
INCEPTION = {
    "3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64),
    "4c": (128, 128, 256, 24, 64, 64), "4d": (112, 144, 288, 32, 64, 64),
    "4e": (256, 160, 320, 32, 128, 128), "5a": (256, 160, 320, 32, 128, 128),
    "5b": (384, 192, 384, 48, 128, 128),
}
POOL_AFTER = {"3b": "pool3/3x3_s2", "4e": "pool4/3x3_s2"}


def layer(name, kind, bottoms, top, body=""):
    lines = [f'  name: "{name}"', f'  type: "{kind}"']
    lines += [f'  bottom: "{b}"' for b in bottoms] + [f'  top: "{top}"']
    return "layer {\n" + "\n".join(lines) + ("\n" + body if body else "") + "\n}\n"


def conv(name, bottom, num_output, kernel, stride=1, pad=0):
    geometry = f"    num_output: {num_output}\n" + (f"    pad: {pad}\n" if pad else "")
    geometry += f"    kernel_size: {kernel}\n" + (f"    stride: {stride}\n" if stride > 1 else "")
    relu = name.replace(name.split("/")[-1], "relu_" + name.split("/")[-1])
    return (layer(name, "Convolution", [bottom], name,
                  "  convolution_param {\n" + geometry + "  }")
            + layer(relu, "ReLU", [name], name))


def pool(name, bottom, kind, kernel, stride, pad=0):
    body = f"  pooling_param {{ pool: {kind} kernel_size: {kernel} stride: {stride}"
    return layer(name, "Pooling", [bottom], name, body + (f" pad: {pad}" if pad else "") + " }")


def lrn(name, bottom):
    return layer(name, "LRN", [bottom], name,
                 "  lrn_param { local_size: 5 alpha: 0.0001 beta: 0.75 }")


def inception(module, bottom):
    one, red3, three, red5, five, proj = INCEPTION[module]
    p = f"inception_{module}"
    text = conv(f"{p}/1x1", bottom, one, 1)
    text += conv(f"{p}/3x3_reduce", bottom, red3, 1) + conv(f"{p}/3x3", f"{p}/3x3_reduce",
                                                            three, 3, pad=1)
    text += conv(f"{p}/5x5_reduce", bottom, red5, 1) + conv(f"{p}/5x5", f"{p}/5x5_reduce",
                                                            five, 5, pad=2)
    text += pool(f"{p}/pool", bottom, "MAX", 3, 1, pad=1) + conv(f"{p}/pool_proj", f"{p}/pool",
                                                                 proj, 1)
    branches = [f"{p}/1x1", f"{p}/3x3", f"{p}/5x5", f"{p}/pool_proj"]
    return text + layer(f"{p}/output", "Concat", branches, f"{p}/output"), f"{p}/output"


def googlenet(batch):
    text = ('# GoogLeNet for inference (written by scripts/make_googlenet_prototxt.py).\n'
            'name: "GoogleNet"\n')
    text += layer("data", "Input", [], "data", "  input_param { shape { dim: %d dim: 3 dim: 224 "
                  "dim: 224 } }" % batch)
    text += conv("conv1/7x7_s2", "data", 64, 7, stride=2, pad=3)
    text += pool("pool1/3x3_s2", "conv1/7x7_s2", "MAX", 3, 2) + lrn("pool1/norm1",
                                                                    "pool1/3x3_s2")
    text += conv("conv2/3x3_reduce", "pool1/norm1", 64, 1)
    text += conv("conv2/3x3", "conv2/3x3_reduce", 192, 3, pad=1) + lrn("conv2/norm2",
                                                                       "conv2/3x3")
    text += pool("pool2/3x3_s2", "conv2/norm2", "MAX", 3, 2)
    top = "pool2/3x3_s2"
    for module in INCEPTION:
        block, top = inception(module, top)
        text += block
        if module in POOL_AFTER:
            text += pool(POOL_AFTER[module], top, "MAX", 3, 2)
            top = POOL_AFTER[module]
    text += pool("pool5/7x7_s1", top, "AVE", 7, 1)
    text += layer("pool5/drop_7x7_s1", "Dropout", ["pool5/7x7_s1"], "pool5/7x7_s1",
                  "  dropout_param { dropout_ratio: 0.4 }")
    text += layer("loss3/classifier", "InnerProduct", ["pool5/7x7_s1"], "loss3/classifier",
                  "  inner_product_param { num_output: 1000 }")
    return text + layer("prob", "Softmax", ["loss3/classifier"], "prob")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--out", default="models/googlenet/deploy.prototxt")
    args = parser.parse_args()
    with atomic_write(args.out, "w") as f:
        f.write(googlenet(args.batch))


if __name__ == "__main__":
    main()
